//! The adaptive batch parallelism decider (Flink's `DefaultVertexParallelismAndInputInfosDecider`):
//! once a vertex's inputs are produced, their size decides how many subtasks read them and which
//! subpartitions each reads.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Flink's `execution.batch.adaptive.auto-parallelism.*` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptiveBatchParallelismDecider {
    pub min_parallelism: u32,
    pub max_parallelism: u32,
    pub avg_data_volume_per_task: u64,
    /// A source's parallelism when its input size is unknown, and the upper bound of one inferred
    /// from its input size; `None`: the max parallelism (Flink 1.19's fallback).
    pub default_source_parallelism: Option<u32>,
}

impl Default for AdaptiveBatchParallelismDecider {
    /// Flink's defaults: 1, 128, 16 MiB.
    fn default() -> Self {
        AdaptiveBatchParallelismDecider {
            min_parallelism: 1,
            max_parallelism: 128,
            avg_data_volume_per_task: 16 * 1024 * 1024,
            default_source_parallelism: None,
        }
    }
}

/// What the decider chose for one vertex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParallelismDecision {
    pub parallelism: u32,
    /// For consumer subtask i, the contiguous subpartitions it reads (of every input's producers);
    /// empty for a source.
    pub subpartition_ranges: Vec<Range<u32>>,
    /// The bytes the decision was made from (`None`: a source of unknown size).
    pub input_bytes: Option<u64>,
    /// Why this parallelism, in words: the formula and the bound that applied.
    pub reason: String,
}

/// `1.5 MiB`-style sizes for the reasons users read.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl AdaptiveBatchParallelismDecider {
    pub fn validate(&self) -> Result<()> {
        if self.min_parallelism == 0 {
            return Err(Error::InvalidAdaptiveConfig(
                "min-parallelism must be at least 1".into(),
            ));
        }
        if self.min_parallelism > self.max_parallelism {
            return Err(Error::InvalidAdaptiveConfig(format!(
                "min-parallelism {} is above max-parallelism {}",
                self.min_parallelism, self.max_parallelism
            )));
        }
        if self.avg_data_volume_per_task == 0 {
            return Err(Error::InvalidAdaptiveConfig(
                "avg-data-volume-per-task must be above 0".into(),
            ));
        }
        Ok(())
    }

    /// Decides from the bytes in each subpartition index, summed over all producers of all inputs
    /// (producers write as many subpartitions as the consumer's max parallelism).
    ///
    /// parallelism = ceil(total / avg-data-volume-per-task) clamped to [min, max], and never more than
    /// there are subpartitions to share. Ranges are contiguous, cover every subpartition once, are
    /// non-empty, and each carries at most total/parallelism plus one subpartition's bytes.
    pub fn decide(&self, bytes_per_subpartition: &[u64]) -> Result<ParallelismDecision> {
        self.decide_within(bytes_per_subpartition, u32::MAX)
    }

    /// [`decide`](Self::decide), never above `slots` (the slots the job can use: Floe runs a
    /// vertex's subtasks side by side, one per slot).
    pub fn decide_within(&self, bytes_per_subpartition: &[u64], slots: u32) -> Result<ParallelismDecision> {
        self.validate()?;
        let n = bytes_per_subpartition.len() as u64;
        if n == 0 {
            return Err(Error::InvalidAdaptiveConfig(
                "the inputs have no subpartitions".into(),
            ));
        }
        let total: u64 = bytes_per_subpartition.iter().sum();
        let (parallelism, reason) = self.bounded(
            total,
            self.min_parallelism,
            self.max_parallelism,
            "max-parallelism",
            n,
            slots,
        );
        Ok(ParallelismDecision {
            parallelism,
            subpartition_ranges: balanced_ranges(bytes_per_subpartition, parallelism),
            input_bytes: Some(total),
            reason,
        })
    }

    /// A source's parallelism (Flink's dynamic source parallelism inference): from its input size
    /// when known, ceil(bytes / avg-data-volume-per-task) within [min-parallelism,
    /// default-source-parallelism]; else default-source-parallelism. Never above `slots`.
    pub fn decide_source(&self, input_bytes: Option<u64>, slots: u32) -> Result<ParallelismDecision> {
        self.validate()?;
        let (upper, upper_name) = match self.default_source_parallelism {
            Some(p) => (p, "default-source-parallelism"),
            None => (self.max_parallelism, "max-parallelism"),
        };
        let (parallelism, reason) = match input_bytes {
            Some(total) => self.bounded(
                total,
                self.min_parallelism.min(upper),
                upper,
                upper_name,
                u64::MAX,
                slots,
            ),
            None if upper > slots => (
                slots.max(1),
                format!(
                    "input size unknown: {upper_name} {upper}, limited to the {slots} slots the job holds"
                ),
            ),
            None => (upper, format!("input size unknown: {upper_name} {upper}")),
        };
        Ok(ParallelismDecision {
            parallelism,
            subpartition_ranges: Vec::new(),
            input_bytes,
            reason,
        })
    }

    /// ceil(total / avg) clamped to [lower, upper], to `subpartitions` and to `slots`, with the
    /// reason in words.
    fn bounded(
        &self,
        total: u64,
        lower: u32,
        upper: u32,
        upper_name: &str,
        subpartitions: u64,
        slots: u32,
    ) -> (u32, String) {
        let wanted = total.div_ceil(self.avg_data_volume_per_task);
        let formula = format!(
            "ceil({} / avg-data-volume-per-task {}) = {wanted}",
            human(total),
            human(self.avg_data_volume_per_task)
        );
        let clamped = wanted.clamp(lower as u64, upper as u64);
        let mut reason = if clamped > wanted {
            format!("{formula}, raised to min-parallelism {lower}")
        } else if clamped < wanted {
            format!("{formula}, limited to {upper_name} {upper}")
        } else {
            formula
        };
        let mut parallelism = clamped;
        if parallelism > subpartitions {
            parallelism = subpartitions;
            reason.push_str(&format!(
                ", limited to the {subpartitions} subpartitions to share"
            ));
        }
        if parallelism > slots as u64 {
            parallelism = slots.max(1) as u64;
            reason.push_str(&format!(", limited to the {slots} slots the job holds"));
        }
        (parallelism as u32, reason)
    }
}

/// Splits `bytes` into `parts` contiguous non-empty ranges: range k ends at the boundary whose
/// running sum is closest to k/parts of the total (by count when everything is empty). Closest,
/// not first reached: a hot subpartition then gets a range of its own instead of being added to
/// a range that was already nearly full. Each range holds at most total/parts plus the largest
/// subpartition.
pub fn balanced_ranges(bytes: &[u64], parts: u32) -> Vec<Range<u32>> {
    let n = bytes.len();
    let parts = (parts as usize).clamp(1, n.max(1));
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0u128);
    for &b in bytes {
        prefix.push(prefix[prefix.len() - 1] + b as u128);
    }
    let total = prefix[n];
    let mut ranges = Vec::with_capacity(parts);
    let mut start = 0usize;
    for k in 1..parts {
        // At least one subpartition here and one for each range after this one.
        let (lowest, highest) = (start + 1, n - (parts - k));
        let end = if total == 0 {
            (k * n / parts).clamp(lowest, highest)
        } else {
            let target = total * k as u128 / parts as u128;
            // The first boundary at or past the target, and the one before it.
            let first = prefix.partition_point(|&p| p < target).clamp(lowest, highest);
            let before = first.saturating_sub(1).max(lowest);
            if target.abs_diff(prefix[before]) <= prefix[first].abs_diff(target) {
                before
            } else {
                first
            }
        };
        ranges.push(start as u32..end as u32);
        start = end;
    }
    ranges.push(start as u32..n as u32);
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn check_ranges(bytes: &[u64], ranges: &[Range<u32>]) {
        assert_eq!(ranges.first().unwrap().start, 0);
        assert_eq!(ranges.last().unwrap().end as usize, bytes.len());
        for w in ranges.windows(2) {
            assert_eq!(w[0].end, w[1].start, "contiguous");
        }
        assert!(ranges.iter().all(|r| !r.is_empty()));
        let total: u64 = bytes.iter().sum();
        let max_one = bytes.iter().copied().max().unwrap_or(0);
        let bound = total.div_ceil(ranges.len() as u64) + max_one;
        for r in ranges {
            let sum: u64 = bytes[r.start as usize..r.end as usize].iter().sum();
            assert!(sum <= bound, "range {r:?} holds {sum} > {bound}");
        }
    }

    #[test]
    fn parallelism_is_total_over_average_clamped() {
        let d = AdaptiveBatchParallelismDecider::default();
        // 100 MiB over 128 subpartitions: ceil(100/16) = 7.
        let bytes = vec![100 * MIB / 128; 128];
        let decision = d.decide(&bytes).unwrap();
        assert_eq!(decision.parallelism, 7);
        check_ranges(&bytes, &decision.subpartition_ranges);
        // Tiny input: min parallelism 1; huge input: max 128.
        assert_eq!(d.decide(&[10; 128]).unwrap().parallelism, 1);
        assert_eq!(d.decide(&vec![GIB; 128]).unwrap().parallelism, 128);
        let custom = AdaptiveBatchParallelismDecider {
            min_parallelism: 3,
            max_parallelism: 5,
            ..d
        };
        assert_eq!(custom.decide(&[0; 16]).unwrap().parallelism, 3);
    }

    const GIB: u64 = 1024 * MIB;

    #[test]
    fn ranges_balance_skewed_bytes() {
        let mut bytes = vec![MIB; 64];
        bytes[3] = 40 * MIB;
        bytes[50] = 20 * MIB;
        let d = AdaptiveBatchParallelismDecider::default();
        let decision = d.decide(&bytes).unwrap();
        assert_eq!(decision.parallelism, (122 * MIB).div_ceil(16 * MIB) as u32);
        check_ranges(&bytes, &decision.subpartition_ranges);
        // The 40 MiB subpartition gets a range nearly to itself.
        let holder = decision
            .subpartition_ranges
            .iter()
            .find(|r| r.contains(&3))
            .unwrap();
        assert!(holder.len() <= 4, "{holder:?}");
    }

    #[test]
    fn never_more_consumers_than_subpartitions() {
        let d = AdaptiveBatchParallelismDecider::default();
        let decision = d.decide(&[GIB; 4]).unwrap();
        assert_eq!(decision.parallelism, 4);
        assert_eq!(decision.subpartition_ranges, vec![0..1, 1..2, 2..3, 3..4]);
    }

    #[test]
    fn reasons_name_the_formula_and_the_bound() {
        let d = AdaptiveBatchParallelismDecider::default();
        let decision = d.decide(&vec![100 * MIB / 128; 128]).unwrap();
        assert_eq!(
            decision.reason,
            "ceil(100.0 MiB / avg-data-volume-per-task 16.0 MiB) = 7"
        );
        assert_eq!(decision.input_bytes, Some(100 * MIB));
        let limited = d.decide_within(&vec![100 * MIB / 128; 128], 4).unwrap();
        assert_eq!(limited.parallelism, 4);
        assert!(
            limited.reason.ends_with(", limited to the 4 slots the job holds"),
            "{}",
            limited.reason
        );
        assert_eq!(
            d.decide(&[10; 128]).unwrap().reason,
            "ceil(1.2 KiB / avg-data-volume-per-task 16.0 MiB) = 1"
        );
        let small = AdaptiveBatchParallelismDecider {
            max_parallelism: 2,
            ..d
        };
        assert!(
            small
                .decide(&vec![GIB; 128])
                .unwrap()
                .reason
                .ends_with("limited to max-parallelism 2")
        );
    }

    #[test]
    fn sources_infer_from_their_input_size_up_to_the_default_source_parallelism() {
        let d = AdaptiveBatchParallelismDecider {
            default_source_parallelism: Some(6),
            ..Default::default()
        };
        assert_eq!(d.decide_source(Some(40 * MIB), 100).unwrap().parallelism, 3);
        let big = d.decide_source(Some(GIB), 100).unwrap();
        assert_eq!(big.parallelism, 6);
        assert!(
            big.reason.ends_with("limited to default-source-parallelism 6"),
            "{}",
            big.reason
        );
        assert_eq!(d.decide_source(None, 100).unwrap().parallelism, 6);
        assert_eq!(d.decide_source(None, 2).unwrap().parallelism, 2);
        assert_eq!(
            AdaptiveBatchParallelismDecider::default()
                .decide_source(None, 4)
                .unwrap()
                .reason,
            "input size unknown: max-parallelism 128, limited to the 4 slots the job holds"
        );
        assert!(d.decide_source(Some(0), 3).unwrap().parallelism == 1);
    }

    #[test]
    fn a_hot_subpartition_gets_a_range_of_its_own() {
        // Half of everything in subpartition 5 of 16: the first range stops before it.
        let mut bytes = vec![10u64; 16];
        bytes[5] = 150;
        let ranges = balanced_ranges(&bytes, 3);
        assert_eq!(ranges, vec![0..5, 5..6, 6..16]);
        check_ranges(&bytes, &ranges);
        // Random skews keep the bound.
        let mut x = 7u64;
        for parts in 1..20u32 {
            let bytes: Vec<u64> = (0..64)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 33) % if x.is_multiple_of(5) { 100_000 } else { 100 }
                })
                .collect();
            check_ranges(&bytes, &balanced_ranges(&bytes, parts));
        }
    }

    #[test]
    fn empty_input_splits_by_count() {
        let ranges = balanced_ranges(&[0; 10], 3);
        assert_eq!(ranges, vec![0..3, 3..6, 6..10]);
    }

    #[test]
    fn rejects_bad_settings() {
        let bad = AdaptiveBatchParallelismDecider {
            min_parallelism: 9,
            max_parallelism: 2,
            ..Default::default()
        };
        assert_eq!(
            bad.decide(&[1]).unwrap_err().to_string(),
            "adaptive parallelism: min-parallelism 9 is above max-parallelism 2"
        );
        assert!(AdaptiveBatchParallelismDecider::default().decide(&[]).is_err());
    }
}
