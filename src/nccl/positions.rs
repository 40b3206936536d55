//! Where the newlines and `N`s of a dense block are, found in one pass over it with bit masks, which also tells
//! whether the block is plain ASCII without escapes or carriage returns: on dense logs' lines of about a hundred
//! bytes, a `memchr` call for each cost more instructions, and the separate UTF-8 and escape checks over the
//! block cost as much as this whole pass.

/// What a dense block holds, as [`BlockIndex::build`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BlockText {
    /// ASCII without escapes or carriage returns (so UTF-8).
    Ascii,
    /// No escape or carriage return, but bytes above 0x7f: UTF-8 or not, the caller checks.
    NonAscii,
    /// An escape or a carriage return: the line-by-line reader handles those.
    Escapes,
}

/// Bit masks of a block's newlines and `N`s, 64 bytes to a word (bit `i` of word `w`: byte `64 w + i`). Kept
/// from block to block so that its buffers are allocated once.
#[derive(Debug, Default)]
pub(super) struct BlockIndex {
    newlines: Vec<u64>,
    capital_ns: Vec<u64>,
}

impl BlockIndex {
    /// Indexes `block`. The masks are complete only when the answer is not [`BlockText::Escapes`].
    pub(super) fn build(&mut self, block: &[u8]) -> BlockText {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: this CPU has AVX2.
            return unsafe { self.build_avx2(block) };
        }
        self.build_with(block, window_masks)
    }

    /// [`BlockIndex::build`] with 32-byte compares: half the instructions of SSE2's 16 (where most of a dense
    /// block's reading was spent before any line was looked at).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn build_avx2(&mut self, block: &[u8]) -> BlockText {
        // A closure here has AVX2 too (it inherits the function's features), so the masks inline.
        self.build_with(block, |window| window_masks_avx2(window))
    }

    #[inline(always)]
    fn build_with(
        &mut self,
        block: &[u8],
        masks_of: impl Fn(&[u8; 64]) -> WindowMasks,
    ) -> BlockText {
        let words = block.len().div_ceil(64);
        self.newlines.resize(words, 0);
        self.capital_ns.resize(words, 0);
        let mut high = 0u8;
        let mut windows = block.chunks_exact(64);
        let masks = self.newlines.iter_mut().zip(self.capital_ns.iter_mut());
        for (window, (newlines, capital_ns)) in windows.by_ref().zip(masks) {
            let found = masks_of(window.try_into().unwrap_or(&[0; 64]));
            if found.escapes {
                return BlockText::Escapes;
            }
            high |= found.high;
            *newlines = found.newlines;
            *capital_ns = found.capital_ns;
        }
        let tail = windows.remainder();
        if !tail.is_empty() {
            let mask = |needle| {
                tail.iter()
                    .enumerate()
                    .fold(0u64, |m, (i, &b)| m | (u64::from(b == needle) << i))
            };
            if tail.iter().any(|&b| b == 0x1b || b == b'\r') {
                return BlockText::Escapes;
            }
            high |= tail.iter().fold(0, |h, &b| h | b);
            self.newlines[words - 1] = mask(b'\n');
            self.capital_ns[words - 1] = mask(b'N');
        }
        if high & 0x80 == 0 {
            BlockText::Ascii
        } else {
            BlockText::NonAscii
        }
    }

    /// The first newline at or after `from`.
    #[inline(always)]
    pub(super) fn newline_from(&self, from: usize) -> Option<usize> {
        next_bit(&self.newlines, from)
    }

    /// The first `N` at or after `from`.
    #[inline(always)]
    pub(super) fn capital_n_from(&self, from: usize) -> Option<usize> {
        next_bit(&self.capital_ns, from)
    }
}

/// The first set bit at or after position `from`.
#[inline(always)]
fn next_bit(masks: &[u64], from: usize) -> Option<usize> {
    let mut word = from / 64;
    let mut bits = masks.get(word)? & (u64::MAX << (from % 64));
    while bits == 0 {
        word += 1;
        bits = *masks.get(word)?;
    }
    Some(word * 64 + bits.trailing_zeros() as usize)
}

/// One window's masks, and what it says about the block's text.
struct WindowMasks {
    newlines: u64,
    capital_ns: u64,
    /// An escape or a carriage return is in the window.
    escapes: bool,
    /// The OR of the window's bytes' high bits (0x80 when any is set).
    high: u8,
}

/// [`WindowMasks`] of 64 bytes: SSE2 (x86_64's baseline) compares, each 16 bytes loaded once.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn window_masks(window: &[u8; 64]) -> WindowMasks {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        _mm_setzero_si128,
    };
    let (mut newlines, mut capital_ns) = (0u64, 0u64);
    // SAFETY: SSE2 is part of every x86_64 CPU (the target's baseline), and each load reads the 16 bytes of
    // `chunk`, without an alignment requirement.
    unsafe {
        let (nl, n, esc, cr) = (
            _mm_set1_epi8(b'\n' as i8),
            _mm_set1_epi8(b'N' as i8),
            _mm_set1_epi8(0x1b),
            _mm_set1_epi8(b'\r' as i8),
        );
        let mut escapes = _mm_setzero_si128();
        let mut bytes = _mm_setzero_si128();
        for (i, chunk) in window.chunks_exact(16).enumerate() {
            let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
            let lane = |needle| u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, needle)) as u16);
            newlines |= lane(nl) << (16 * i);
            capital_ns |= lane(n) << (16 * i);
            escapes = _mm_or_si128(
                escapes,
                _mm_or_si128(_mm_cmpeq_epi8(v, esc), _mm_cmpeq_epi8(v, cr)),
            );
            bytes = _mm_or_si128(bytes, v);
        }
        WindowMasks {
            newlines,
            capital_ns,
            escapes: _mm_movemask_epi8(escapes) != 0,
            high: if _mm_movemask_epi8(bytes) != 0 {
                0x80
            } else {
                0
            },
        }
    }
}

/// [`window_masks`] with AVX2: 32 bytes a compare.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn window_masks_avx2(window: &[u8; 64]) -> WindowMasks {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_or_si256,
        _mm256_set1_epi8,
    };
    // SAFETY: each load reads 32 bytes of `window`, without an alignment requirement.
    let (lo, hi) = unsafe {
        (
            _mm256_loadu_si256(window.as_ptr().cast::<__m256i>()),
            _mm256_loadu_si256(window[32..].as_ptr().cast::<__m256i>()),
        )
    };
    let mask =
        |v, needle| _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(needle))) as u32;
    let both = |needle| u64::from(mask(lo, needle)) | (u64::from(mask(hi, needle)) << 32);
    let escapes = _mm256_or_si256(
        _mm256_or_si256(
            _mm256_cmpeq_epi8(lo, _mm256_set1_epi8(0x1b)),
            _mm256_cmpeq_epi8(lo, _mm256_set1_epi8(b'\r' as i8)),
        ),
        _mm256_or_si256(
            _mm256_cmpeq_epi8(hi, _mm256_set1_epi8(0x1b)),
            _mm256_cmpeq_epi8(hi, _mm256_set1_epi8(b'\r' as i8)),
        ),
    );
    WindowMasks {
        newlines: both(b'\n' as i8),
        capital_ns: both(b'N' as i8),
        escapes: _mm256_movemask_epi8(escapes) != 0,
        high: if _mm256_movemask_epi8(_mm256_or_si256(lo, hi)) != 0 {
            0x80
        } else {
            0
        },
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn window_masks(window: &[u8; 64]) -> WindowMasks {
    swar_window_masks(window)
}

/// [`window_masks`] without SSE2: eight bytes at a time, each byte equal to a needle giving its high bit
/// (exact: no borrow crosses bytes), gathered into eight mask bits by a multiply.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn swar_window_masks(window: &[u8; 64]) -> WindowMasks {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let equal_bytes = |word: u64, needle: u8| {
        let x = word ^ (0x0101_0101_0101_0101 * u64::from(needle));
        !(((x & LOW7) + LOW7) | x | LOW7)
    };
    let gather = |high_bits: u64| (high_bits >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
    let (mut newlines, mut capital_ns, mut escapes, mut high) = (0u64, 0u64, 0u64, 0u64);
    for (i, chunk) in window.chunks_exact(8).enumerate() {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        newlines |= gather(equal_bytes(word, b'\n')) << (8 * i);
        capital_ns |= gather(equal_bytes(word, b'N')) << (8 * i);
        escapes |= equal_bytes(word, 0x1b) | equal_bytes(word, b'\r');
        high |= word;
    }
    WindowMasks {
        newlines,
        capital_ns,
        escapes: escapes != 0,
        high: if high & 0x8080_8080_8080_8080 != 0 {
            0x80
        } else {
            0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index and its positions against byte loops, on blocks of the needles, their neighbours and
    /// high bytes in every pattern, with an escape or a carriage return in some.
    #[test]
    fn block_index_matches_a_byte_loop() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut bytes = vec![0u8; 1000];
        for round in 0..400 {
            let pick: &[u8] = if round % 4 == 0 {
                &[b'N', b'\n', b'N' + 1, 0x1b, b'\r', 0x80 | b'N', b'a']
            } else {
                &[b'N', b'\n', b'N' + 1, 0x80 | b'N', b'a']
            };
            for b in &mut bytes {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = pick[(state >> 32) as usize % pick.len()];
                // Mostly ASCII blocks, so that both answers occur.
                if round % 3 != 0 && *b & 0x80 != 0 {
                    *b = b'a';
                }
            }
            let block = &bytes[..round * 5 / 2];
            let escapes = block.iter().any(|&b| b == 0x1b || b == b'\r');
            let expected = if escapes {
                BlockText::Escapes
            } else if block.is_ascii() {
                BlockText::Ascii
            } else {
                BlockText::NonAscii
            };
            let mut index = BlockIndex::default();
            assert_eq!(index.build(block), expected, "{round}");
            if escapes {
                continue;
            }
            for from in 0..=block.len() + 1 {
                let first = |needle| {
                    block
                        .get(from..)
                        .and_then(|rest| rest.iter().position(|&b| b == needle))
                        .map(|p| from + p)
                };
                assert_eq!(index.newline_from(from), first(b'\n'), "{round} {from}");
                assert_eq!(index.capital_n_from(from), first(b'N'), "{round} {from}");
            }
            for window in block.chunks_exact(64) {
                let window: &[u8; 64] = window.try_into().unwrap();
                let fields = |m: WindowMasks| (m.newlines, m.capital_ns, m.escapes, m.high);
                let swar = fields(swar_window_masks(window));
                assert_eq!(fields(window_masks(window)), swar);
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: this CPU has AVX2.
                    assert_eq!(fields(unsafe { window_masks_avx2(window) }), swar);
                }
            }
        }
    }
}
