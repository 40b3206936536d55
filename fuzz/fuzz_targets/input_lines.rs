//! Arbitrary bytes through the line reader `collective` and `nccl` share: every line is cut to `max_line`, lines
//! are numbered 1, 2, 3 …, and there is one line per `\n` plus one for trailing bytes after the last.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&max_line, input)) = data.split_first() else {
        return;
    };
    // Small, so cut lines are common; zero is allowed (every line comes back empty).
    let max_line = usize::from(max_line % 64);
    let mut lines = 0u64;
    fabric_preflight::input::for_each_line(input, max_line, None, |no, line| {
        lines += 1;
        assert_eq!(no, lines, "lines are numbered in order");
        assert!(line.len() <= max_line, "line {no} is {} bytes", line.len());
    })
    .expect("reading a slice cannot fail");
    let newlines = input.iter().filter(|&&b| b == b'\n').count() as u64;
    let trailing = u64::from(input.last().is_some_and(|&b| b != b'\n'));
    assert_eq!(lines, newlines + trailing);
});
