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
}

impl Default for AdaptiveBatchParallelismDecider {
    /// Flink's defaults: 1, 128, 16 MiB.
    fn default() -> Self {
        AdaptiveBatchParallelismDecider {
            min_parallelism: 1,
            max_parallelism: 128,
            avg_data_volume_per_task: 16 * 1024 * 1024,
        }
    }
}

/// What the decider chose for one vertex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParallelismDecision {
    pub parallelism: u32,
    /// For consumer subtask i, the contiguous subpartitions it reads (of every input's producers).
    pub subpartition_ranges: Vec<Range<u32>>,
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
        self.validate()?;
        let n = bytes_per_subpartition.len() as u64;
        if n == 0 {
            return Err(Error::InvalidAdaptiveConfig(
                "the inputs have no subpartitions".into(),
            ));
        }
        let total: u64 = bytes_per_subpartition.iter().sum();
        let wanted = total.div_ceil(self.avg_data_volume_per_task);
        let parallelism = wanted
            .clamp(self.min_parallelism as u64, self.max_parallelism as u64)
            .min(n) as u32;
        Ok(ParallelismDecision {
            parallelism,
            subpartition_ranges: balanced_ranges(bytes_per_subpartition, parallelism),
        })
    }
}

/// Splits `bytes` into `parts` contiguous non-empty ranges: range k ends where the running sum first
/// reaches k/parts of the total (by count when everything is empty).
pub fn balanced_ranges(bytes: &[u64], parts: u32) -> Vec<Range<u32>> {
    let n = bytes.len();
    let parts = (parts as usize).clamp(1, n.max(1));
    let total: u128 = bytes.iter().map(|&b| b as u128).sum();
    let mut ranges = Vec::with_capacity(parts);
    let mut start = 0usize;
    let mut prefix: u128 = 0;
    let mut i = 0usize;
    for k in 1..parts {
        // Leave at least one subpartition for each remaining range.
        let last_allowed_end = n - (parts - k);
        let mut end = start + 1;
        if total == 0 {
            end = end.max(k * n / parts);
        } else {
            let target = total * k as u128 / parts as u128;
            while i < end {
                prefix += bytes[i] as u128;
                i += 1;
            }
            while end < last_allowed_end && prefix < target {
                prefix += bytes[i] as u128;
                i += 1;
                end += 1;
            }
        }
        let end = end.min(last_allowed_end);
        while i < end {
            prefix += bytes[i] as u128;
            i += 1;
        }
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
