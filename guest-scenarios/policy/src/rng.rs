//! numpy's `default_rng(x).choice(candidates)`, bit for bit, for one non-negative integer seed `x < 2^64`.
//!
//! Three pieces, each a re-implementation from the published algorithms (numpy's
//! `bit_generator.pyx`, `_pcg64.pyx`/`pcg64.h` and `distributions.c`), checked against numpy's own
//! output by the golden vectors in `fixtures/golden/start_turn_vectors.json`:
//! - [`SeedSequence`]: O'Neill's seed_seq hashing as numpy implements it: the integer entropy split
//!   into little-endian 32-bit words, mixed into a pool of 4 words; `generate_state` draws 32-bit words
//!   from the pool with its own hash constants, and pairs them little-endian into u64s.
//! - [`Pcg64`]: the 128-bit LCG with the XSL-RR output function, seeded like numpy's
//!   `pcg_setseq_128_srandom_r` from the four u64 words `w0..w3` of `generate_state(4, uint64)`:
//!   `initstate = w0<<64 | w1`, `initseq = w2<<64 | w3`. Each draw steps first, then outputs.
//! - [`Draws32::bounded`]: Lemire's multiply-and-reject on 32-bit draws, which is how numpy's
//!   `integers(0, n)` (and so `choice`) samples any range that fits in 32 bits. The 32-bit draws come
//!   from splitting 64-bit outputs, low half first, the high half kept for the next draw.
//!
//! Invariant: everything here is integer arithmetic with explicit wrapping, so the results are the same
//! on every target (the wasm component and the native tests agree by construction).

const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;
const POOL_SIZE: usize = 4;

/// PCG's default 128-bit multiplier (numpy's `PCG_DEFAULT_MULTIPLIER_128`).
const PCG_MULT: u128 = 0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645;

/// numpy's `SeedSequence(entropy)` with no spawn key and the default pool size of 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedSequence {
    pool: [u32; POOL_SIZE],
}

impl SeedSequence {
    pub fn new(entropy: u64) -> SeedSequence {
        // `_int_to_uint32_array`: 0 is one zero word; otherwise little-endian 32-bit words, no padding.
        let words: &[u32] = &[entropy as u32, (entropy >> 32) as u32];
        let entropy_words = if entropy >> 32 == 0 {
            &words[..1]
        } else {
            words
        };

        let mut hash_const = INIT_A;
        let mut hashmix = |value: u32| -> u32 {
            let mut v = value ^ hash_const;
            hash_const = hash_const.wrapping_mul(MULT_A);
            v = v.wrapping_mul(hash_const);
            v ^ (v >> XSHIFT)
        };
        let mix = |x: u32, y: u32| -> u32 {
            let r = MIX_MULT_L
                .wrapping_mul(x)
                .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
            r ^ (r >> XSHIFT)
        };

        let mut pool = [0u32; POOL_SIZE];
        for (i, slot) in pool.iter_mut().enumerate() {
            *slot = hashmix(entropy_words.get(i).copied().unwrap_or(0));
        }
        for src in 0..POOL_SIZE {
            for dst in 0..POOL_SIZE {
                if src != dst {
                    let h = hashmix(pool[src]);
                    pool[dst] = mix(pool[dst], h);
                }
            }
        }
        // At most two entropy words exist, so the "more entropy than pool" loop never runs.
        SeedSequence { pool }
    }

    pub fn pool(&self) -> [u32; POOL_SIZE] {
        self.pool
    }

    /// `generate_state(n, uint32)`.
    pub fn generate_u32(&self, out: &mut [u32]) {
        let mut hash_const = INIT_B;
        for (i, slot) in out.iter_mut().enumerate() {
            let mut v = self.pool[i % POOL_SIZE] ^ hash_const;
            hash_const = hash_const.wrapping_mul(MULT_B);
            v = v.wrapping_mul(hash_const);
            *slot = v ^ (v >> XSHIFT);
        }
    }

    /// `generate_state(4, uint64)`: eight 32-bit words viewed as little-endian u64s.
    pub fn generate_u64x4(&self) -> [u64; 4] {
        let mut w = [0u32; 8];
        self.generate_u32(&mut w);
        [0, 1, 2, 3].map(|i| u64::from(w[2 * i]) | (u64::from(w[2 * i + 1]) << 32))
    }
}

/// numpy's PCG64 bit generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
}

impl Pcg64 {
    /// `pcg_setseq_128_srandom_r(initstate, initseq)`.
    pub fn new(initstate: u128, initseq: u128) -> Pcg64 {
        let inc = (initseq << 1) | 1;
        let mut rng = Pcg64 { state: 0, inc };
        rng.step();
        rng.state = rng.state.wrapping_add(initstate);
        rng.step();
        rng
    }

    /// `numpy.random.PCG64(entropy)`, i.e. the bit generator of `numpy.random.default_rng(entropy)`.
    pub fn from_entropy(entropy: u64) -> Pcg64 {
        let w = SeedSequence::new(entropy).generate_u64x4();
        Pcg64::new(
            (u128::from(w[0]) << 64) | u128::from(w[1]),
            (u128::from(w[2]) << 64) | u128::from(w[3]),
        )
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    /// One 64-bit output (`random_raw()`): step, then XSL-RR of the new state.
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let rot = (self.state >> 122) as u32;
        let xored = ((self.state >> 64) as u64) ^ (self.state as u64);
        xored.rotate_right(rot)
    }
}

/// 32-bit draws carved out of 64-bit outputs, as numpy's `buffered_uint32` does within one call of
/// `integers`: low half first, then the kept high half.
#[derive(Debug, Clone)]
pub struct Draws32 {
    rng: Pcg64,
    kept: Option<u32>,
}

impl Draws32 {
    pub fn new(rng: Pcg64) -> Draws32 {
        Draws32 { rng, kept: None }
    }

    pub fn next_u32(&mut self) -> u32 {
        match self.kept.take() {
            Some(high) => high,
            None => {
                let x = self.rng.next_u64();
                self.kept = Some((x >> 32) as u32);
                x as u32
            }
        }
    }

    /// An index in `0..n`, as `integers(0, n)` picks it for `1 <= n <= 2^32 - 1` (numpy's
    /// `buffered_bounded_lemire_uint32` with `rng = n - 1`). `n == 1` consumes no draw; `n == 0` is
    /// answered with 0 (numpy raises; callers never ask).
    pub fn bounded(&mut self, n: u32) -> u32 {
        if n <= 1 {
            return 0;
        }
        let mut m = u64::from(self.next_u32()) * u64::from(n);
        let mut leftover = m as u32;
        if leftover < n {
            let threshold = n.wrapping_neg() % n; // (2^32 - n) % n
            while leftover < threshold {
                m = u64::from(self.next_u32()) * u64::from(n);
                leftover = m as u32;
            }
        }
        (m >> 32) as u32
    }
}

/// `numpy.random.default_rng(entropy).choice(n)` as an index into a population of `n` (`n >= 1`).
pub fn choice_index(entropy: u64, n: u32) -> u32 {
    Draws32::new(Pcg64::from_entropy(entropy)).bounded(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_candidate_needs_no_draw_and_zero_is_guarded() {
        assert_eq!(choice_index(42, 1), 0);
        assert_eq!(choice_index(42, 0), 0);
    }

    #[test]
    fn draws_split_low_half_first() {
        let mut raw = Pcg64::from_entropy(7);
        let x = raw.next_u64();
        let mut d = Draws32::new(Pcg64::from_entropy(7));
        assert_eq!(d.next_u32(), x as u32);
        assert_eq!(d.next_u32(), (x >> 32) as u32);
    }

    #[test]
    fn bounded_stays_in_range() {
        let mut d = Draws32::new(Pcg64::from_entropy(1));
        for n in [2u32, 3, 7, 1000, u32::MAX - 1, u32::MAX] {
            for _ in 0..50 {
                assert!(d.bounded(n) < n);
            }
        }
    }
}
