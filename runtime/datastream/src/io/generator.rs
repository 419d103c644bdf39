//! Generated sources: the seeded Zipf word generator, sequences and collections.

use std::sync::Arc;

use async_trait::async_trait;

use crate::data::Data;
use crate::error::Result;
use crate::operators::Op;
use crate::pace::{Pacer, Stride, paced_batch};
use crate::types::TaskMetrics;

use super::*;

pub(crate) use crate::rng::SplitMix;

/// Words in the generator's vocabulary.
pub const GENERATOR_VOCABULARY: usize = 10_000;

/// The word of Zipf rank `rank`: two or more two-letter syllables (4 to 8 letters for the
/// vocabulary, ~5 on average like English text), distinct for distinct ranks, letters only.
pub fn generator_word(rank: usize) -> String {
    const SYLLABLES: [&str; 32] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "be", "da", "fu", "go", "hi", "jo", "ke", "la", "ma",
        "no", "pe", "qu", "ri", "so", "tu", "va", "we", "xi", "ya", "ze", "an", "el", "in", "or",
    ];
    // The first two syllables spell rank mod 1024; the rest spell rank / 1024 in bijective base 32,
    // so different ranks never give the same word.
    let mut word = String::with_capacity(8);
    word.push_str(SYLLABLES[rank % 32]);
    word.push_str(SYLLABLES[(rank / 32) % 32]);
    let mut n = rank / 1024;
    while n > 0 {
        n -= 1;
        word.push_str(SYLLABLES[n % 32]);
        n /= 32;
    }
    word
}

/// The `index`-th line of the generator with `seed`: 1 to 12 Zipf(1.0)-distributed words. A pure
/// function of (seed, index), so the output does not depend on the parallelism.
pub fn generator_line(seed: u64, index: u64, cdf: &[f64], words: &[String]) -> String {
    let mut rng = SplitMix::new(seed ^ SplitMix::new(index).next_u64());
    let n = 1 + (rng.next_u64() % 12) as usize;
    let mut line = String::new();
    for i in 0..n {
        let u = rng.unit();
        let rank = cdf.partition_point(|&c| c < u).min(words.len() - 1);
        if i > 0 {
            line.push(' ');
        }
        line.push_str(&words[rank]);
    }
    line
}

/// Cumulative Zipf(1.0) distribution over the vocabulary, and the vocabulary.
pub fn generator_vocabulary() -> (Vec<f64>, Vec<String>) {
    let weights: Vec<f64> = (1..=GENERATOR_VOCABULARY).map(|r| 1.0 / r as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    let cdf = weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect();
    (cdf, (0..GENERATOR_VOCABULARY).map(generator_word).collect())
}

/// `data_generator`: lines `subtask, subtask + p, ...` (unbounded) or this subtask's contiguous
/// share of `0..count`, optionally at a rate ([`Pacer`]: this subtask's share of the whole
/// source's rate).
#[derive(Debug)]
pub(crate) struct GeneratorSource {
    pub seed: u64,
    pub stride: Stride,
    pub pacer: Pacer,
    pub vocabulary: (Vec<f64>, Vec<String>),
    pub metrics: Arc<TaskMetrics>,
}

#[async_trait]
impl Source<String> for GeneratorSource {
    async fn produce(&mut self, out: &mut dyn Op<String>) -> Result<bool> {
        let (seed, (cdf, words)) = (self.seed, &self.vocabulary);
        let make = |n| out.collect(generator_line(seed, n, cdf, words));
        Ok(paced_batch(&mut self.stride, &mut self.pacer, &self.metrics, make).await)
    }

    fn position(&self) -> String {
        self.stride.position()
    }

    fn restore(&mut self, position: &str) -> std::result::Result<(), String> {
        self.stride = Stride::restore(position)?;
        Ok(())
    }

    fn pending(&self) -> Option<u64> {
        self.pacer.lag
    }

    fn share_rate(&mut self, n: usize) {
        self.pacer.share(n)
    }
}

/// `generate_sequence`: this subtask's contiguous share of `from..=to`.
#[derive(Debug)]
pub(crate) struct SequenceSource {
    pub next: u64,
    /// Exclusive end.
    pub end: u64,
}

#[async_trait]
impl Source<u64> for SequenceSource {
    async fn produce(&mut self, out: &mut dyn Op<u64>) -> Result<bool> {
        let stop = self.end.min(self.next.saturating_add(4096));
        while self.next < stop {
            out.collect(self.next);
            self.next += 1;
        }
        Ok(self.next < self.end)
    }

    fn position(&self) -> String {
        format!("next={},end={}", self.next, self.end)
    }

    fn restore(&mut self, position: &str) -> std::result::Result<(), String> {
        [self.next, self.end] = position_fields(position, ["next", "end"])?;
        Ok(())
    }
}

/// `from_collection`: the elements (the source runs with parallelism 1, as in Flink).
#[derive(Debug)]
pub(crate) struct CollectionSource<T> {
    pub items: Arc<Vec<T>>,
    pub next: usize,
}

#[async_trait]
impl<T: Data> Source<T> for CollectionSource<T> {
    async fn produce(&mut self, out: &mut dyn Op<T>) -> Result<bool> {
        let stop = self.items.len().min(self.next + 4096);
        for item in &self.items[self.next..stop] {
            out.collect(item.clone());
        }
        self.next = stop;
        Ok(self.next < self.items.len())
    }

    fn position(&self) -> String {
        format!("next={}", self.next)
    }

    fn restore(&mut self, position: &str) -> std::result::Result<(), String> {
        let [next] = position_fields(position, ["next"])?;
        self.next = usize::try_from(next).map_err(|_| "next out of range".to_string())?;
        Ok(())
    }
}
