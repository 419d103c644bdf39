//! SplitMix64 (Steele, Lea and Flood, 2014): the one small seeded generator behind every
//! generated input (the word generator, Nexmark) and every random schedule (`floe verify`, the
//! fault and lifecycle campaigns). The same seed gives the same numbers in every process and on
//! every platform, so a generated input is the same on every TaskManager and a failing seed
//! replays.

use std::time::Duration;

/// A SplitMix64 sequence.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    pub const fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..bound` (`0..1` for a bound of 0), by multiply and shift (Lemire): no
    /// modulo bias towards small numbers.
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound.max(1))) >> 64) as u64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in `from..=to` milliseconds.
    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to.saturating_sub(from) + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_splitmix64s() {
        // The first outputs for seed 0 (Vigna's reference splitmix64.c).
        let mut rng = SplitMix::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn below_and_millis_stay_in_their_ranges() {
        let mut rng = SplitMix::new(7);
        for _ in 0..10_000 {
            assert!(rng.below(3) < 3);
            let d = rng.millis(200, 1_500).as_millis();
            assert!((200..=1_500).contains(&d), "{d}");
        }
        assert_eq!(rng.below(0), 0);
    }
}
