//! Arbitrary YAML text through the profile loader (parse, `checks` ids, `extends` chain, merge, validation):
//! every outcome is a profile or a `ProfileError`, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let known = fabric_preflight::probes::ids();
    match fabric_preflight::profile::load_text("fuzz.yaml", text, &known) {
        Ok(profile) => {
            for id in &known {
                let _ = profile.settings(id);
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
