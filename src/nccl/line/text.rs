//! Field scanning shared by the framing and the grammars: ASCII-fast trims, a forward cursor, digit runs,
//! word splitting. Each is a faster equal of a `str` method, measured on channel lines.

use super::record::Endpoint;

/// `str::trim` (same Unicode whitespace) that tests ASCII bytes directly, falling back to `str::trim` only
/// when an end is non-ASCII: the generic version decodes every char, and it runs several times per line.
/// Most texts it gets have nothing to trim: told from their two end bytes, inline (a call cost more).
#[inline(always)]
pub(super) fn trim(s: &str) -> &str {
    let kept = |b: Option<&u8>| b.is_some_and(|&b| b > b' ' && b.is_ascii());
    if kept(s.as_bytes().first()) && kept(s.as_bytes().last()) {
        return s;
    }
    trimmed(s)
}

/// [`trim`] for a text that usually has one space at an end (a message after its token, a field before
/// ` : `): that space is dropped first, so that the inline test usually suffices.
#[inline(always)]
pub(super) fn trim_spaced(s: &str) -> &str {
    let s = s.strip_prefix(' ').unwrap_or(s);
    trim(s.strip_suffix(' ').unwrap_or(s))
}

#[inline(never)]
fn trimmed(s: &str) -> &str {
    trim_start(trim_end(s))
}

pub(super) fn trim_end(s: &str) -> &str {
    let b = s.as_bytes();
    let mut end = b.len();
    while end > 0 && is_ascii_space(b[end - 1]) {
        end -= 1;
    }
    if end > 0 && !b[end - 1].is_ascii() {
        return s[..end].trim_end();
    }
    &s[..end]
}

pub(super) fn trim_start(s: &str) -> &str {
    let b = s.as_bytes();
    let mut start = 0;
    while start < b.len() && is_ascii_space(b[start]) {
        start += 1;
    }
    if start < b.len() && !b[start].is_ascii() {
        return s[start..].trim_start();
    }
    &s[start..]
}

/// `char::is_whitespace` on ASCII: U+0009..=U+000D and the space.
#[inline]
pub(super) fn is_ascii_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t'..=b'\r')
}

/// A forward reader over ASCII fields of a message.
pub(super) struct Cursor<'a> {
    s: &'a str,
    pub(super) at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(s: &'a str) -> Self {
        Cursor { s, at: 0 }
    }

    #[inline(always)]
    fn rest(&self) -> &'a [u8] {
        &self.s.as_bytes()[self.at..]
    }

    /// Steps over `lit` when it comes next.
    #[inline(always)]
    pub(super) fn eat(&mut self, lit: &[u8]) -> bool {
        let found = self.rest().starts_with(lit);
        if found {
            self.at += lit.len();
        }
        found
    }

    /// Bytes while `keep` holds.
    #[inline(always)]
    fn take_while(&mut self, keep: impl Fn(u8) -> bool) -> &'a str {
        let n = self.rest().iter().take_while(|&&b| keep(b)).count();
        let taken = sub(self.s, self.at, self.at + n);
        self.at += n;
        taken
    }

    /// Decimal digits (at least one) as a `u32`; `None` when absent or too large.
    #[inline(always)]
    pub(super) fn number(&mut self) -> Option<u32> {
        let (digits, value) = leading_number(self.rest());
        self.at += digits;
        value
    }

    /// `105[5]` or `105`; the bracket holds letters and digits only (any other text: not this shape).
    #[inline(always)]
    pub(super) fn endpoint(&mut self) -> Option<Endpoint<'a>> {
        let rank = self.number()?;
        let bracket = if self.eat(b"[") {
            let inside = self.take_while(|b| b.is_ascii_alphanumeric());
            if !self.eat(b"]") {
                return None;
            }
            Some(inside)
        } else {
            None
        };
        Some(Endpoint { rank, bracket })
    }
}

pub(super) const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that is an ASCII digit, all eight at once (no carry crosses a byte):
/// the prefix's digit runs (device, tid, pid), read backwards, are counted a word at a time (a byte loop there
/// cost more instructions; forwards, where the runs are shorter, it costs fewer: [`leading_number`]).
#[inline(always)]
pub(super) fn digit_bits(word: u64) -> u64 {
    // High bit set iff the low seven bits are >= '0', and iff they are > '9'.
    let at_least_0 = (word | HIGH_BITS).wrapping_sub(0x3030_3030_3030_3030);
    let above_9 = (word & !HIGH_BITS).wrapping_add(0x4646_4646_4646_4646);
    !word & at_least_0 & !above_9 & HIGH_BITS
}

/// The ASCII digits `b` starts with: how many, and their value (`None` when there are none or it exceeds a
/// `u32`). One loop that counts and converts: the numbers read forwards (channel, ranks, device, code) are
/// one to three digits, where counting eight bytes at a time and converting after cost three times as many
/// instructions.
#[inline(always)]
pub(super) fn leading_number(b: &[u8]) -> (usize, Option<u32>) {
    let mut digits = 0;
    let mut value = 0u64;
    while let Some(&c) = b.get(digits) {
        if !c.is_ascii_digit() {
            break;
        }
        value = value.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
        digits += 1;
    }
    (digits, digit_run_value(&b[..digits], value))
}

/// The value of the digit run `d` as a `u32`, given `wrapped`, the same digits accumulated in a `u64` without
/// overflow checks: exact up to 19 digits (no wrap possible), checked beyond (leading zeros may precede a
/// small number). Saturating at every digit instead cost two instructions a digit.
#[inline(always)]
pub(super) fn digit_run_value(d: &[u8], wrapped: u64) -> Option<u32> {
    match d.len() {
        0 => None,
        1..=19 => u32::try_from(wrapped).ok(),
        _ => digits_u32(d),
    }
}

/// How many ASCII digits end `b[..end]`.
#[inline(always)]
pub(super) fn digits_before(b: &[u8], end: usize) -> usize {
    let mut n = 0;
    while end - n >= 8 {
        let chunk = &b[end - n - 8..end - n];
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let non_digits = !digit_bits(word) & HIGH_BITS;
        if non_digits != 0 {
            return n + (non_digits.leading_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + b[..end - n]
        .iter()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .count()
}

/// `str::parse::<u32>` for bytes the caller knows to be ASCII digits only (none: `None`), without the
/// general parser's sign and radix handling.
#[inline(always)]
pub(super) fn digits_u32(d: &[u8]) -> Option<u32> {
    // Nine digits cannot overflow: no checked multiply (its latency chain showed in profiles).
    if !d.is_empty() && d.len() <= 9 {
        return Some(d.iter().fold(0, |n, &c| n * 10 + u32::from(c - b'0')));
    }
    d.iter()
        .try_fold(0u32, |n, &c| {
            n.checked_mul(10)?.checked_add(u32::from(c - b'0'))
        })
        .filter(|_| !d.is_empty())
}

/// Where the first ` : ` starts: a colon search, as a substring searcher's setup cost more than the search
/// on these few bytes.
pub(super) fn spaced_colon(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    memchr::memchr_iter(b':', b)
        .find(|&i| i > 0 && b[i - 1] == b' ' && b.get(i + 1) == Some(&b' '))
        .map(|i| i - 1)
}

/// `str::split_once` for an ASCII byte, without the char searcher's setup: one `memchr` (a byte-by-byte
/// search showed in profiles on device lists of a few dozen bytes).
pub(super) fn split_byte(s: &str, byte: u8) -> Option<(&str, &str)> {
    let at = memchr::memchr(byte, s.as_bytes())?;
    Some((&s[..at], &s[at + 1..]))
}

/// `str::split_whitespace` (same Unicode whitespace), testing ASCII bytes directly and decoding only
/// non-ASCII chars: the generic version decodes every char and costed a tenth of the time on channel lines.
pub(super) struct Words<'a> {
    pub(super) s: &'a str,
    pub(super) at: usize,
}

impl Words<'_> {
    /// Whether the char at byte `i` (a char boundary) is whitespace, and its length.
    #[inline(always)]
    fn char_at(&self, i: usize) -> (bool, usize) {
        let b = self.s.as_bytes()[i];
        if b.is_ascii() {
            return (is_ascii_space(b), 1);
        }
        self.non_ascii_at(i)
    }

    /// Kept out of line so that the ASCII path above inlines into the loops (it did not with this inside).
    #[cold]
    #[inline(never)]
    fn non_ascii_at(&self, i: usize) -> (bool, usize) {
        let c = self.s[i..].chars().next().unwrap_or(' ');
        (c.is_whitespace(), c.len_utf8())
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let len = self.s.len();
        while self.at < len {
            let (space, n) = self.char_at(self.at);
            if !space {
                break;
            }
            self.at += n;
        }
        if self.at >= len {
            return None;
        }
        let start = self.at;
        while self.at < len {
            let (space, n) = self.char_at(self.at);
            if space {
                break;
            }
            self.at += n;
        }
        Some(&self.s[start..self.at])
    }
}

/// `text[from..to]`, by `split_at`, which inlines where a range index did not (a call on every channel line).
#[inline(always)]
pub(super) fn sub(text: &str, from: usize, to: usize) -> &str {
    text.split_at(from).1.split_at(to - from).0
}
