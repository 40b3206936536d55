//! The `pair` control protocol and ring inputs on arbitrary bytes: the frame parser (header checks on every
//! prefix, as the socket reader applies them byte by byte), message decoding and re-encoding, the memory each
//! announced port brings (both ends must agree on the GPU leg whichever announces first), the Slurm node-list
//! expander and the MPI hostfile reader. No panic, no allocation beyond the 16 KiB frame limit or the node cap.
//! `cargo fuzz run pair_wire` (or, on a stable toolchain, `cargo fuzz run -s none pair_wire`).

#![no_main]

use fabric_preflight::pair::{ring, wire};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for end in 0..data.len().min(wire::HEADER_LEN) {
        let _ = wire::check_header(&data[..=end]);
    }
    if let Ok((msg, used)) = wire::decode(data) {
        assert!(used <= wire::HEADER_LEN + wire::MAX_BODY);
        // What decodes re-encodes to something that decodes to the same message.
        let again = wire::encode(&msg);
        assert_eq!(wire::decode(&again).map(|(m, _)| m).ok(), Some(msg.clone()));
        if let wire::Message::Hello { ports, .. } | wire::Message::Welcome { ports, .. } = &msg {
            for a in ports {
                let _ = (a.memory.describe(), a.memory.why());
                for b in ports {
                    assert_eq!(
                        wire::gpu_leg(&a.memory, &b.memory),
                        wire::gpu_leg(&b.memory, &a.memory)
                    );
                }
            }
        }
    }
    let text = String::from_utf8_lossy(data);
    if let Ok(nodes) = ring::expand_nodelist(&text) {
        assert!(!nodes.is_empty());
    }
    let _ = ring::parse_hostfile(&text);
    let _ = ring::port_of(&text);
});
