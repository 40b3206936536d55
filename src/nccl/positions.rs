//! Where a byte value is in a block of text, found with bit masks (the line reader's newlines and `N`s): on
//! dense logs' lines of about a hundred bytes, a `memchr` call for each cost more instructions.

/// The positions of one byte value in a block, in order, read from a bit mask of 64 bytes at a time.
pub(super) struct BytePositions<'a> {
    bytes: &'a [u8],
    needle: u8,
    /// Where the window that `mask` covers starts.
    base: usize,
    /// Bit `i`: `bytes[base + i]` is the needle (bits of positions already passed are cleared).
    mask: u64,
}

impl<'a> BytePositions<'a> {
    pub(super) fn new(bytes: &'a [u8], needle: u8) -> Self {
        BytePositions {
            bytes,
            needle,
            base: 0,
            mask: window_mask(bytes, needle),
        }
    }

    /// The first position at or after `from`; the ones before it are dropped (`from` never goes back).
    #[inline(always)]
    pub(super) fn next_from(&mut self, from: usize) -> Option<usize> {
        loop {
            let passed = from.saturating_sub(self.base);
            if passed >= 64 {
                self.mask = 0;
            } else {
                self.mask &= u64::MAX << passed;
            }
            if self.mask != 0 {
                return Some(self.base + self.mask.trailing_zeros() as usize);
            }
            self.base = (self.base + 64).max(from);
            let window = self.bytes.get(self.base..)?;
            if window.is_empty() {
                return None;
            }
            self.mask = window_mask(window, self.needle);
        }
    }
}

/// Bit `i` set where `bytes[i] == needle`, for the first 64 bytes (fewer at the end of a block).
#[inline(always)]
fn window_mask(bytes: &[u8], needle: u8) -> u64 {
    match bytes.first_chunk::<64>() {
        Some(window) => full_window_mask(window, needle),
        None => bytes
            .iter()
            .enumerate()
            .fold(0, |mask, (i, &b)| mask | (u64::from(b == needle) << i)),
    }
}

/// [`window_mask`] on 64 bytes: four SSE2 compares (x86_64's baseline) and their byte masks.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn full_window_mask(window: &[u8; 64], needle: u8) -> u64 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
    };
    let mut mask = 0u64;
    // SAFETY: SSE2 is part of every x86_64 CPU (the target's baseline), and each load reads the 16 bytes of
    // `chunk`, without an alignment requirement.
    unsafe {
        let wanted = _mm_set1_epi8(needle as i8);
        for (i, chunk) in window.chunks_exact(16).enumerate() {
            let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
            let bits = _mm_movemask_epi8(_mm_cmpeq_epi8(v, wanted)) as u16;
            mask |= u64::from(bits) << (16 * i);
        }
    }
    mask
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn full_window_mask(window: &[u8; 64], needle: u8) -> u64 {
    swar_window_mask(window, needle)
}

/// [`window_mask`] on 64 bytes without SSE2: eight bytes at a time, each byte equal to the needle giving
/// its high bit (exact: no borrow crosses bytes), gathered into eight mask bits by a multiply.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn swar_window_mask(window: &[u8; 64], needle: u8) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let spread = 0x0101_0101_0101_0101 * u64::from(needle);
    let mut mask = 0u64;
    for (i, chunk) in window.chunks_exact(8).enumerate() {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or_default()) ^ spread;
        let zero_bytes = !(((x & LOW7) + LOW7) | x | LOW7);
        let bits = (zero_bytes >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
        mask |= bits << (8 * i);
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_masks_and_positions_match_a_byte_loop() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut bytes = vec![0u8; 1000];
        for round in 0..200 {
            for b in &mut bytes {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // Mostly the needles and their neighbours, so that every bit pattern occurs.
                *b = [b'N', b'\n', b'N' + 1, 0x80 | b'N', state as u8][(state >> 32) as usize % 5];
            }
            let len = 64 + round * 4;
            let block = &bytes[..len];
            for needle in [b'N', b'\n'] {
                let window: &[u8; 64] = block.first_chunk().unwrap();
                let expected = window
                    .iter()
                    .enumerate()
                    .fold(0u64, |m, (i, &b)| m | (u64::from(b == needle) << i));
                assert_eq!(full_window_mask(window, needle), expected);
                assert_eq!(swar_window_mask(window, needle), expected);
                // Positions from a moving start, skipping ahead by varying strides.
                let mut positions = BytePositions::new(block, needle);
                let mut from = 0;
                while from <= len {
                    let expected = block[from.min(len)..]
                        .iter()
                        .position(|&b| b == needle)
                        .map(|p| from + p);
                    assert_eq!(positions.next_from(from), expected, "{round} {from}");
                    from += 1 + (from * 7 + round) % 150;
                }
            }
        }
    }
}
