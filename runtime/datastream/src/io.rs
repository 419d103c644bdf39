//! Sources and sinks: text files and directories on a file system or S3 (through opendal), the
//! seeded word generator, sequences and collections; part-file and stdout sinks.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use opendal::Operator;

use crate::data::Data;
use crate::error::{Error, Result};
use crate::operators::{BoxOp, Chunk, Collector, Op, Target};
use crate::pace::{Pacer, Stride, paced_batch};
use crate::types::TaskMetrics;

/// Bytes a text source reads per request (and per batch pushed through the chain).
pub const DEFAULT_READ_CHUNK: usize = 4 << 20;

/// A file system or bucket plus a path inside it.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    pub op: Operator,
    /// Path relative to the operator's root, without a leading `/`.
    pub path: String,
    pub url: String,
}

/// A location `locate` can open: a path, or a URL of a scheme it knows (checked when a job is built,
/// so a typo fails the submission rather than a task).
pub(crate) fn check_location(url: &str) -> Result<()> {
    match url.split_once("://") {
        Some((scheme, _)) if !matches!(scheme, "s3" | "s3a" | "file") => {
            Err(Error::ObjectStore(floe_storage::Error::InvalidUrl {
                url: url.to_string(),
                reason: format!("unsupported scheme {scheme}://; expected a path, file://, s3:// or s3a://"),
            }))
        }
        _ if url.is_empty() => Err(Error::ObjectStore(floe_storage::Error::InvalidUrl {
            url: String::new(),
            reason: "expected a path or a URL, got an empty string".into(),
        })),
        _ => Ok(()),
    }
}

/// Opens `s3://bucket/prefix`, `file:///path` or a plain (absolute or relative) path, through the one
/// object-storage wrapper (`floe-storage`: endpoint and keys from configuration or the environment).
pub(crate) fn locate(url: &str, conf: &BTreeMap<String, String>) -> Result<Location> {
    check_location(url)?;
    let storage_url = if let Some(rest) = url.strip_prefix("s3a://") {
        format!("s3://{rest}")
    } else if url.starts_with("s3://") || url.starts_with("file://") {
        url.to_string()
    } else {
        let absolute = if url.starts_with('/') {
            std::path::PathBuf::from(url)
        } else {
            std::env::current_dir()?.join(url)
        };
        format!("file://{}", absolute.display())
    };
    let store = floe_storage::ObjectStore::open(&storage_url, conf)?;
    let (op, path) = store.raw("");
    Ok(Location {
        op,
        path: path.trim_end_matches('/').to_string(),
        url: url.to_string(),
    })
}

/// The files under a location: the file itself, or the visible files of a directory (Hadoop's
/// convention: names starting with `.` or `_` are hidden), sorted by name, with their sizes.
pub(crate) async fn list_files(loc: &Location) -> Result<Vec<(String, u64)>> {
    let storage = |e| Error::storage(&loc.url, e);
    let trimmed = loc.path.trim_end_matches('/');
    if !loc.path.ends_with('/') {
        match loc.op.stat(trimmed).await {
            Ok(meta) if meta.is_file() => return Ok(vec![(trimmed.to_string(), meta.content_length())]),
            Ok(_) => {}
            // S3 has no directories: a missing object may still be a prefix.
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => {}
            Err(e) => return Err(storage(e)),
        }
    }
    let dir = if trimmed.is_empty() {
        String::new()
    } else {
        format!("{trimmed}/")
    };
    let mut files = Vec::new();
    for entry in loc.op.list(&dir).await.map_err(storage)? {
        let name = entry.name().trim_end_matches('/');
        if entry.metadata().is_dir() || name.is_empty() || name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        let path = format!("{dir}{name}");
        let size = loc.op.stat(&path).await.map_err(storage)?.content_length();
        files.push((path, size));
    }
    if files.is_empty() {
        return Err(Error::NoInput { url: loc.url.clone() });
    }
    files.sort();
    Ok(files)
}

/// One file of a text source's split: its path under the source's location, its length when the
/// split was made, and the byte range of it the split owns.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SplitFile {
    pub path: String,
    pub len: u64,
    pub start: u64,
    pub end: u64,
}

/// A text source's checkpointed position (JSON): its split, the file in it and the offset of the
/// first line not emitted yet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TextPosition {
    pub split: Vec<SplitFile>,
    pub file: usize,
    pub line: u64,
    pub skipping: bool,
}

/// Reads the lines of one subtask's byte range of the concatenated files, Hadoop-style: the range
/// [i*len/p, (i+1)*len/p) owns the lines whose preceding newline (or file start) lies in it, so a
/// subtask skips a partial first line and reads past its end to finish its last one.
#[derive(Debug)]
pub(crate) struct SplitReader {
    loc: Location,
    /// (path, file length, local start, local end) of each file overlapping the split.
    files: Vec<(String, u64, u64, u64)>,
    file: usize,
    pos: u64,
    line_start: u64,
    skipping: bool,
    carry: Vec<u8>,
    chunk: usize,
}

impl SplitReader {
    pub(crate) fn new(
        loc: Location,
        all: &[(String, u64)],
        subtask: u32,
        parallelism: u32,
        chunk: usize,
    ) -> Self {
        let total: u64 = all.iter().map(|f| f.1).sum();
        let (s, e) = (
            (u128::from(total) * u128::from(subtask) / u128::from(parallelism)) as u64,
            (u128::from(total) * (u128::from(subtask) + 1) / u128::from(parallelism)) as u64,
        );
        let mut files = Vec::new();
        let mut offset = 0u64;
        for (path, len) in all {
            let (ls, le) = (
                s.saturating_sub(offset).min(*len),
                e.saturating_sub(offset).min(*len),
            );
            if ls < le {
                files.push((path.clone(), *len, ls, le));
            }
            offset += len;
        }
        SplitReader::of(loc, files, 0, chunk)
    }

    /// Whole files: file `i` of the listing goes to subtask `i mod parallelism`, read from start
    /// to end, one after the other (Flink's file source with a format it does not split).
    pub(crate) fn whole_files(
        loc: Location,
        all: &[(String, u64)],
        subtask: u32,
        parallelism: u32,
        chunk: usize,
    ) -> Self {
        let files = all
            .iter()
            .enumerate()
            .filter(|(i, _)| *i as u64 % u64::from(parallelism.max(1)) == u64::from(subtask))
            .map(|(_, (path, len))| (path.clone(), *len, 0, *len))
            .collect();
        SplitReader::of(loc, files, 0, chunk)
    }

    /// A reader of `files` at the start of file `file`.
    fn of(loc: Location, files: Vec<(String, u64, u64, u64)>, file: usize, chunk: usize) -> Self {
        let mut reader = SplitReader {
            loc,
            files,
            file,
            pos: 0,
            line_start: 0,
            skipping: false,
            carry: Vec::new(),
            chunk: chunk.max(1),
        };
        reader.start_file();
        reader
    }

    fn start_file(&mut self) {
        if let Some(&(_, _, ls, _)) = self.files.get(self.file) {
            self.pos = ls;
            self.line_start = ls;
            self.skipping = ls > 0;
            self.carry.clear();
        }
    }

    fn next_file(&mut self) {
        self.file += 1;
        self.start_file();
    }

    /// Between chunks: the split itself (each file's path, length and byte range) and, in it, the
    /// file and the offset of the first line not emitted yet (a partial line read so far is read
    /// again after a restore). The split is recorded rather than recomputed from a new listing: a
    /// file added to, or removed from, the input directory after the checkpoint would otherwise
    /// shift every split and the index of the file being read.
    fn position(&self) -> String {
        let position = TextPosition {
            split: self
                .files
                .iter()
                .map(|(path, len, start, end)| SplitFile {
                    path: path.clone(),
                    len: *len,
                    start: *start,
                    end: *end,
                })
                .collect(),
            file: self.file,
            line: self.line_start,
            skipping: self.skipping,
        };
        serde_json::to_string(&position).unwrap_or_default()
    }

    /// A reader continuing at a [`SplitReader::position`]: the recorded split, checked against the
    /// files as they are now (a file that changed length since the checkpoint is an error naming it;
    /// reading it on would lose or repeat lines).
    async fn restored(
        loc: Location,
        position: &TextPosition,
        chunk: usize,
    ) -> std::result::Result<Self, String> {
        for f in &position.split {
            let now = match loc.op.stat(&f.path).await {
                Ok(meta) => meta.content_length(),
                Err(e) => return Err(format!("input file {} of the checkpointed split: {e}", f.path)),
            };
            if now != f.len {
                return Err(format!(
                    "input file {} changed since the checkpoint: it had {} bytes, now {now}",
                    f.path, f.len
                ));
            }
        }
        if position.file > position.split.len() {
            return Err(format!(
                "file {} is past the split's {} files",
                position.file,
                position.split.len()
            ));
        }
        let files = position
            .split
            .iter()
            .map(|f| (f.path.clone(), f.len, f.start, f.end))
            .collect();
        let mut reader = SplitReader::of(loc, files, position.file, chunk);
        if reader.file < reader.files.len() {
            reader.pos = position.line;
            reader.line_start = position.line;
            reader.skipping = position.skipping;
        }
        Ok(reader)
    }

    /// Reads one chunk and emits the complete lines it owns; `Ok(false)` once the split is done.
    pub(crate) async fn next_chunk(&mut self, emit: &mut (dyn FnMut(&[u8]) + Send)) -> Result<bool> {
        let Some((path, len, _, le)) = self.files.get(self.file).cloned() else {
            return Ok(false);
        };
        if self.pos >= len {
            // End of file: an unterminated last line is still a line.
            if !self.skipping && self.line_start < len && self.line_start <= le {
                emit(strip_cr(&self.carry));
            }
            self.next_file();
            return Ok(self.file < self.files.len());
        }
        let end = (self.pos + self.chunk as u64).min(len);
        let buf = self
            .loc
            .op
            .read_with(&path)
            .range(self.pos..end)
            .await
            .map_err(|e| Error::storage(&path, e))?
            .to_bytes();
        let base = self.pos;
        self.pos = end;
        let mut rest: &[u8] = &buf;
        let mut at = base;
        if self.skipping {
            match memchr::memchr(b'\n', rest) {
                None => return Ok(true),
                Some(i) => {
                    self.skipping = false;
                    at = base + i as u64 + 1;
                    rest = &rest[i + 1..];
                    self.line_start = at;
                }
            }
        }
        while let Some(i) = memchr::memchr(b'\n', rest) {
            if self.line_start > le {
                self.next_file();
                return Ok(self.file < self.files.len());
            }
            if self.carry.is_empty() {
                emit(strip_cr(&rest[..i]));
            } else {
                self.carry.extend_from_slice(&rest[..i]);
                emit(strip_cr(&self.carry));
                self.carry.clear();
            }
            at += i as u64 + 1;
            rest = &rest[i + 1..];
            self.line_start = at;
        }
        if self.line_start > le {
            self.next_file();
            return Ok(self.file < self.files.len());
        }
        self.carry.extend_from_slice(rest);
        Ok(true)
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Drives a source: pushes one batch of records into the chain per call.
#[async_trait]
pub(crate) trait Source<T>: Send {
    /// Emits the next batch; `Ok(false)` when the source is exhausted.
    async fn produce(&mut self, out: &mut dyn Op<T>) -> Result<bool>;
    /// Where the next batch starts (taken between batches, at a checkpoint barrier).
    fn position(&self) -> String;
    /// Continues from a [`Source::position`] of the same subtask; the error says what is wrong.
    fn restore(&mut self, position: &str) -> std::result::Result<(), String>;
    /// Records due but not read yet (Flink's `pendingRecords`), if the source knows.
    fn pending(&self) -> Option<u64> {
        None
    }
    /// This source is one of `n` splits a subtask reads: a rate-limited one takes `1/n` of it.
    fn share_rate(&mut self, _n: usize) {}
    /// A source that knows its event time (a split's watermark, Flink's per-split watermark
    /// generation): no record it emits later has a smaller timestamp. `None`: it does not know.
    fn watermark(&self) -> Option<i64> {
        None
    }
}

/// Parses `name=value,name=value` positions.
pub(crate) fn position_fields<const N: usize>(
    position: &str,
    names: [&str; N],
) -> std::result::Result<[u64; N], String> {
    let mut out = [0u64; N];
    let mut seen = [false; N];
    for field in position.split(',') {
        let (name, value) = field
            .split_once('=')
            .ok_or_else(|| format!("expected name=value, got {field:?}"))?;
        let i = names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| format!("unknown field {name:?}; expected {}", names.join(", ")))?;
        out[i] = value
            .parse()
            .map_err(|_| format!("{name}: expected a non-negative integer, got {value:?}"))?;
        seen[i] = true;
    }
    match names.iter().zip(seen).find(|(_, s)| !s) {
        Some((missing, _)) => Err(format!("missing field {missing}")),
        None => Ok(out),
    }
}

/// A restored subtask's splits (Flink's source reader with several splits): the sources made
/// for each position it was given, read in turn, a batch from each, so unbounded ones all make
/// progress. One source behaves (and snapshots) exactly as that source; several record a JSON
/// array of their positions, which a later restore splits again.
pub(crate) struct MultiSource<S> {
    sources: Vec<S>,
    next: usize,
}

impl<S> MultiSource<S> {
    pub(crate) fn new(sources: Vec<S>) -> Self {
        MultiSource { sources, next: 0 }
    }
}

#[async_trait]
impl<T: Send, S: Source<T>> Source<T> for MultiSource<S> {
    async fn produce(&mut self, out: &mut dyn Op<T>) -> Result<bool> {
        if self.sources.is_empty() {
            return Ok(false);
        }
        let i = self.next % self.sources.len();
        if self.sources[i].produce(out).await? {
            self.next = i + 1;
        } else if self.sources.len() > 1 {
            // Exhausted: its position stays recorded (at its end) only until the others end too.
            self.sources.remove(i);
            self.next = i;
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    fn position(&self) -> String {
        match self.sources.as_slice() {
            [one] => one.position(),
            many => serde_json::to_string(&many.iter().map(|s| s.position()).collect::<Vec<_>>())
                .unwrap_or_default(),
        }
    }

    fn restore(&mut self, _: &str) -> std::result::Result<(), String> {
        Err("a source of several splits is made from their positions, not restored".into())
    }

    fn pending(&self) -> Option<u64> {
        self.sources.iter().map(|s| s.pending()).sum()
    }

    /// The splits' watermarks combine as a task's channels do: the smallest (a finished split
    /// holds nothing back).
    fn watermark(&self) -> Option<i64> {
        self.sources.iter().map(|s| s.watermark()).min().flatten()
    }
}

/// `read_text_file`: lines of this subtask's split.
#[derive(Debug)]
pub(crate) struct TextSource {
    pub url: String,
    pub conf: BTreeMap<String, String>,
    pub subtask: u32,
    pub parallelism: u32,
    pub chunk: usize,
    /// Each subtask reads whole files (`SplitReader::whole_files`), not byte ranges.
    pub whole_files: bool,
    pub reader: Option<SplitReader>,
    /// A checkpointed position to start from, applied when the split is opened.
    pub restored: Option<String>,
}

impl TextSource {
    async fn open(&mut self) -> Result<()> {
        if self.reader.is_none() {
            let loc = locate(&self.url, &self.conf)?;
            let reader = match &self.restored {
                // The split recorded in the checkpoint, not a new listing.
                Some(position) => {
                    let restore_error = |m: String| Error::Restore {
                        checkpoint: 0,
                        message: format!("text source {}: {m}", self.url),
                    };
                    let parsed = parse_text_position(position).map_err(restore_error)?;
                    SplitReader::restored(loc, &parsed, self.chunk)
                        .await
                        .map_err(restore_error)?
                }
                None => {
                    let files = list_files(&loc).await?;
                    if self.whole_files {
                        SplitReader::whole_files(loc, &files, self.subtask, self.parallelism, self.chunk)
                    } else {
                        SplitReader::new(loc, &files, self.subtask, self.parallelism, self.chunk)
                    }
                }
            };
            self.reader = Some(reader);
        }
        Ok(())
    }
}

fn parse_text_position(position: &str) -> std::result::Result<TextPosition, String> {
    serde_json::from_str(position).map_err(|e| {
        format!(
            "position {position:?}: expected {{\"split\":[...],\"file\":N,\"line\":N,\"skipping\":bool}}: {e}"
        )
    })
}

#[async_trait]
impl Source<String> for TextSource {
    async fn produce(&mut self, out: &mut dyn Op<String>) -> Result<bool> {
        self.open().await?;
        let Some(reader) = self.reader.as_mut() else {
            return Ok(false);
        };
        reader
            .next_chunk(&mut |line| out.collect(String::from_utf8_lossy(line).into_owned()))
            .await
    }

    fn position(&self) -> String {
        match (&self.reader, &self.restored) {
            (Some(r), _) => r.position(),
            (None, Some(restored)) => restored.clone(),
            // Not opened yet: nothing read. Which split it is stays recorded, so a subtask of
            // another parallelism that takes it over lists the files and reads this split.
            (None, None) => format!("unopened={},of={}", self.subtask, self.parallelism),
        }
    }

    /// The split is re-created from the position when the source opens (after the files are
    /// checked): the position is checked for shape now.
    fn restore(&mut self, position: &str) -> std::result::Result<(), String> {
        if position.is_empty() {
            self.restored = None;
            return Ok(());
        }
        if position.starts_with("unopened=") {
            let [subtask, parallelism] = position_fields(position, ["unopened", "of"])?;
            if parallelism == 0 || subtask >= parallelism {
                return Err(format!("split {subtask} of {parallelism} does not exist"));
            }
            self.subtask = subtask as u32;
            self.parallelism = parallelism as u32;
            self.restored = None;
            return Ok(());
        }
        parse_text_position(position)?;
        self.restored = Some(position.to_string());
        Ok(())
    }
}

/// SplitMix64: a tiny, seedable, portable generator (the same numbers in every process).
#[derive(Debug, Clone)]
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

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
        let u = rng.next_f64();
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

/// The synchronous end of a sink: formats records as text lines into chunks for the async side.
pub(crate) struct SinkOp<T> {
    pub prefix: Vec<u8>,
    pub buffer: Vec<u8>,
    /// Hand the buffer on once it holds this many bytes (0: at every drain).
    pub threshold: usize,
    pub pending: Vec<Chunk>,
    pub count: u64,
    pub metrics: Arc<TaskMetrics>,
    pub _t: std::marker::PhantomData<fn(T)>,
}

impl<T: Data> Collector<T> for SinkOp<T> {
    fn collect(&mut self, record: T) {
        self.write(&record)
    }
}

impl<T: Data> SinkOp<T> {
    /// A new buffer starts at full size (plus room for the line that crosses the threshold):
    /// growing it by doubling copied every byte again.
    fn next_capacity(&self) -> usize {
        if self.threshold == 0 {
            0
        } else {
            self.threshold + 256
        }
    }

    fn write(&mut self, record: &T) {
        if !self.prefix.is_empty() {
            self.buffer.extend_from_slice(&self.prefix);
        }
        record.write_text(&mut self.buffer);
        self.buffer.push(b'\n');
        self.count += 1;
        if self.threshold > 0 && self.buffer.len() >= self.threshold {
            let next = Vec::with_capacity(self.next_capacity());
            self.pending.push(Chunk {
                target: Target::Sink,
                subpartition: 0,
                bytes: Bytes::from(std::mem::replace(&mut self.buffer, next)),
            });
        }
    }
}

impl<T: Data> Op<T> for SinkOp<T> {
    fn takes_reused(&self) -> bool {
        true
    }

    fn collect_reused(&mut self, record: &mut T) {
        self.write(record)
    }

    fn finish(&mut self) {}

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        if (flush || self.threshold == 0) && !self.buffer.is_empty() {
            let next = Vec::with_capacity(self.next_capacity());
            self.pending.push(Chunk {
                target: Target::Sink,
                subpartition: 0,
                bytes: Bytes::from(std::mem::replace(&mut self.buffer, next)),
            });
        }
        out.append(&mut self.pending);
        self.metrics.add_out(std::mem::take(&mut self.count));
    }

    crate::operators::tail_checkpoint!();
}

pub(crate) fn sink_op<T: Data>(prefix: Vec<u8>, threshold: usize, metrics: Arc<TaskMetrics>) -> BoxOp<T> {
    let mut op = SinkOp::<T> {
        prefix,
        buffer: Vec::new(),
        threshold,
        pending: Vec::new(),
        count: 0,
        metrics,
        _t: std::marker::PhantomData,
    };
    op.buffer.reserve(op.next_capacity());
    Box::new(op)
}

/// The asynchronous end of a sink: the writer and committer of the unified sink model (seed 000).
#[async_trait]
pub(crate) trait SinkIo: Send {
    async fn write(&mut self, bytes: Bytes) -> Result<()>;
    /// A checkpoint barrier: close what was written since the last one as pending commit and say
    /// what the committer needs after a restore.
    async fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<String>> {
        Ok(None)
    }
    /// Checkpoint `checkpoint` completed: commit what it covers.
    async fn commit(&mut self, _checkpoint: u64) -> Result<()> {
        Ok(())
    }
    /// Makes the output visible (commit); only called after all input was processed.
    async fn close(self: Box<Self>) -> Result<()>;
}

/// What a checkpointing file sink records per checkpoint: the parts written up to the barrier
/// (pending commit), by name, and the number of the next part.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FileSinkState {
    /// File names (in the sink's directory) of the parts pending commit, without the leading `.`
    /// and `.inprogress` of their in-progress names.
    pub pending: Vec<String>,
    pub next_part: u64,
    /// The lineage the parts are numbered in (their `part-{lineage}-` prefix): the subtask index,
    /// or `{subtask}c{checkpoint}` for a subtask a rescale from that checkpoint added. Numbers
    /// are unique within a lineage, so a restore deletes exactly its lineage's parts after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<String>,
    /// Lineages this sink took over from other subtasks in a rescale and numbers no parts in: their
    /// abandoned in-progress parts (of attempts a rescale cancelled) are its to remove at the end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taken_over: Vec<String>,
}

/// `sink_to_file`. Without checkpointing: `.part-{subtask}-{attempt}.inprogress`, renamed to
/// `part-{subtask}` on success. With checkpointing: one part per checkpoint interval,
/// `.part-{subtask}-{n}-{writer}.inprogress`, renamed to `part-{subtask}-{n}-{writer}` when the
/// checkpoint covering it completes (or at end of input). `{writer}` is unique to this sink
/// instance (Flink's part-file UUID): two attempts of one subtask (one of them on a TaskManager
/// declared lost that still runs) never write, rename or delete each other's objects, and a commit
/// renames exactly the files its checkpoint recorded.
pub(crate) struct FileSinkIo {
    url: String,
    conf: BTreeMap<String, String>,
    subtask: u32,
    attempt: u64,
    checkpointing: bool,
    /// Names this instance's parts apart from every other writer's.
    writer_id: String,
    /// Checkpointing: the states this sink resumes from (`None`: started fresh; several after a
    /// rescale; none: a subtask the rescale added).
    restore: Option<(u64, Vec<FileSinkState>)>,
    /// Prefix of this sink's committed parts (see [`FileSinkState::lineage`]).
    lineage: String,
    /// Lineages whose parts this sink took over (its own included): their abandoned in-progress
    /// parts are its to remove at the end.
    lineages: Vec<String>,
    started: bool,
    /// Parts closed at a barrier, by the checkpoint that covers them, with their names.
    pending: Vec<(u64, String)>,
    next_part: u64,
    open: Option<(Location, String, opendal::Writer)>,
}

impl std::fmt::Debug for FileSinkIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSinkIo")
            .field("url", &self.url)
            .field("subtask", &self.subtask)
            .field("attempt", &self.attempt)
            .field("writer_id", &self.writer_id)
            .field("next_part", &self.next_part)
            .finish()
    }
}

async fn rename(loc: &Location, from: &str, to: &str) -> Result<()> {
    if loc.op.info().capability().rename {
        loc.op.rename(from, to).await.map_err(|e| Error::storage(to, e))
    } else {
        loc.op.copy(from, to).await.map_err(|e| Error::storage(to, e))?;
        loc.op.delete(from).await.map_err(|e| Error::storage(from, e))
    }
}

/// The part number of `name` if it is a committed part of `lineage` written by a checkpointing
/// sink (`part-{lineage}-{n}-{writer}`).
fn committed_part_number(name: &str, lineage: &str) -> Option<u64> {
    let rest = name.strip_prefix(&format!("part-{lineage}-"))?;
    let (n, writer) = rest.split_once('-')?;
    if writer.is_empty() {
        return None;
    }
    n.parse().ok()
}

impl FileSinkIo {
    pub(crate) fn new(url: String, ctx: &crate::operators::OpContext) -> Self {
        let restore = ctx.restore.as_ref().map(|r| {
            let states = r
                .sinks
                .iter()
                .map(|s| {
                    serde_json::from_str::<FileSinkState>(s).unwrap_or_else(|e| {
                        tracing::warn!(
                            "file sink state {s:?} unreadable ({e}): nothing pending taken from it"
                        );
                        FileSinkState::default()
                    })
                })
                .collect();
            (r.checkpoint, states)
        });
        FileSinkIo {
            url,
            conf: ctx.configuration.clone(),
            subtask: ctx.subtask,
            attempt: ctx.attempt,
            checkpointing: ctx.checkpointing,
            writer_id: uuid::Uuid::new_v4().simple().to_string(),
            restore,
            lineage: ctx.subtask.to_string(),
            lineages: Vec::new(),
            started: false,
            pending: Vec::new(),
            next_part: 0,
            open: None,
        }
    }

    fn dir(loc: &Location) -> String {
        loc.path.trim_end_matches('/').to_string()
    }

    /// The committed name of this writer's part `part` (checkpointing).
    fn part_name(&self, part: u64) -> String {
        format!("part-{}-{part}-{}", self.lineage, self.writer_id)
    }

    fn in_progress_of(dir: &str, name: &str) -> String {
        format!("{dir}/.{name}.inprogress")
    }

    /// Before the first write: refuse a file where the directory goes; with checkpointing, also
    /// bring the directory to the restored checkpoint (or
    /// to nothing): commit the parts it left pending (its completion may not have reached this
    /// sink), and delete this subtask's committed parts numbered from its `next_part` on (committed
    /// after it, at an end of input). In-progress parts of other writers are left alone: they are
    /// hidden (no reader lists them), and one may belong to an attempt still running whose data
    /// must not be lost.
    async fn start(&mut self) -> Result<()> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let loc = locate(&self.url, &self.conf)?;
        let dir = Self::dir(&loc);
        // Once per sink, before its first part: a file where the parts would go is an error that
        // names the output, not one write failure per attempt.
        if let Ok(meta) = loc.op.stat(&dir).await
            && meta.is_file()
        {
            return Err(Error::OutputIsAFile {
                url: self.url.clone(),
            });
        }
        if !self.checkpointing {
            return Ok(());
        }
        // (lineage, its pending parts, the first part number the restored checkpoint does not
        // cover) of every state taken over; this sink numbers on in the first one's lineage.
        let own = self.subtask.to_string();
        let mut inherited = Vec::new();
        let taken: Vec<(String, Vec<String>, u64)> = match self.restore.take() {
            // A fresh start: this subtask's earlier parts are not part of this run.
            None => vec![(own, Vec::new(), 0)],
            // A subtask a rescale from checkpoint `c` added: a lineage of its own; parts in it are
            // from an earlier attempt after that same checkpoint.
            Some((c, states)) if states.is_empty() => vec![(format!("{own}c{c}"), Vec::new(), 0)],
            Some((_, states)) => states
                .into_iter()
                .map(|st| {
                    inherited.extend(st.taken_over);
                    (
                        st.lineage.unwrap_or_else(|| own.clone()),
                        st.pending,
                        st.next_part,
                    )
                })
                .collect(),
        };
        for (_, pending, _) in &taken {
            for name in pending {
                let (from, to) = (Self::in_progress_of(&dir, name), format!("{dir}/{name}"));
                if loc.op.exists(&from).await.map_err(|e| Error::storage(&from, e))? {
                    rename(&loc, &from, &to).await?;
                }
            }
        }
        let entries = match loc.op.list(&format!("{dir}/")).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::storage(&self.url, e)),
        };
        for entry in entries {
            let name = entry.name().trim_end_matches('/');
            let stale = taken.iter().any(|(lineage, _, next_part)| {
                committed_part_number(name, lineage).is_some_and(|n| n >= *next_part)
            });
            if stale {
                let path = format!("{dir}/{name}");
                tracing::info!(path, "removing a part the restored checkpoint does not cover");
                loc.op.delete(&path).await.map_err(|e| Error::storage(&path, e))?;
            }
        }
        self.lineages = taken.iter().map(|(l, _, _)| l.clone()).collect();
        for l in inherited {
            if !self.lineages.contains(&l) {
                self.lineages.push(l);
            }
        }
        let (lineage, _, next_part) = taken.into_iter().next().unwrap_or_default();
        self.lineage = lineage;
        self.next_part = next_part;
        Ok(())
    }

    async fn writer(&mut self) -> Result<&mut opendal::Writer> {
        self.start().await?;
        if self.open.is_none() {
            let loc = locate(&self.url, &self.conf)?;
            let dir = Self::dir(&loc);
            let tmp = if self.checkpointing {
                Self::in_progress_of(&dir, &self.part_name(self.next_part))
            } else {
                format!("{dir}/.part-{}-{}.inprogress", self.subtask, self.attempt)
            };
            let w = loc.op.writer(&tmp).await.map_err(|e| Error::storage(&tmp, e))?;
            self.open = Some((loc, tmp, w));
        }
        match self.open.as_mut() {
            Some((_, _, w)) => Ok(w),
            None => Err(Error::Graph("sink writer not open".into())),
        }
    }

    /// Closes the open part (if any) and returns its committed name.
    async fn close_part(&mut self) -> Result<Option<String>> {
        let Some((_, tmp, mut w)) = self.open.take() else {
            return Ok(None);
        };
        w.close().await.map_err(|e| Error::storage(&tmp, e))?;
        let name = self.part_name(self.next_part);
        self.next_part += 1;
        Ok(Some(name))
    }

    /// End of input, after this writer committed everything: this subtask's in-progress parts of
    /// other writers (attempts that failed or were cancelled, whose names never repeat) will never
    /// be committed; they go now. Not earlier: while the job runs, one of them may belong to an
    /// attempt still writing.
    async fn remove_abandoned_parts(&self) -> Result<()> {
        let loc = locate(&self.url, &self.conf)?;
        let dir = Self::dir(&loc);
        let entries = match loc.op.list(&format!("{dir}/")).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::storage(&self.url, e)),
        };
        let mut mine: Vec<String> = self.lineages.iter().map(|l| format!(".part-{l}-")).collect();
        if mine.is_empty() {
            mine.push(format!(".part-{}-", self.subtask));
        }
        for entry in entries {
            let name = entry.name().trim_end_matches('/');
            // Everything of this writer is committed by now: what is left is someone else's.
            let abandoned = mine.iter().any(|m| {
                name.strip_prefix(m.as_str())
                    .is_some_and(|rest| rest.ends_with(".inprogress"))
            });
            if abandoned {
                let path = format!("{dir}/{name}");
                loc.op.delete(&path).await.map_err(|e| Error::storage(&path, e))?;
            }
        }
        Ok(())
    }

    async fn commit_parts(&mut self, up_to: u64) -> Result<()> {
        let (ready, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(c, _)| *c <= up_to);
        self.pending = later;
        if ready.is_empty() {
            return Ok(());
        }
        let loc = locate(&self.url, &self.conf)?;
        let dir = Self::dir(&loc);
        for (_, name) in ready {
            rename(&loc, &Self::in_progress_of(&dir, &name), &format!("{dir}/{name}")).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl SinkIo for FileSinkIo {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        let url = self.url.clone();
        self.writer()
            .await?
            .write(bytes)
            .await
            .map_err(|e| Error::storage(&url, e))
    }

    async fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<String>> {
        self.start().await?;
        if let Some(name) = self.close_part().await? {
            self.pending.push((checkpoint, name));
        }
        let state = FileSinkState {
            pending: self.pending.iter().map(|(_, name)| name.clone()).collect(),
            next_part: self.next_part,
            lineage: Some(self.lineage.clone()),
            taken_over: self
                .lineages
                .iter()
                .filter(|l| **l != self.lineage)
                .cloned()
                .collect(),
        };
        Ok(Some(serde_json::to_string(&state).unwrap_or_default()))
    }

    async fn commit(&mut self, checkpoint: u64) -> Result<()> {
        self.commit_parts(checkpoint).await
    }

    async fn close(mut self: Box<Self>) -> Result<()> {
        if self.checkpointing {
            // End of input. Its sources finished only after their final checkpoint completed, so
            // what is pending belongs to completed checkpoints. Data written after the last
            // barrier is not covered by any checkpoint: committed too, with a warning (an
            // operator that emits at end of input; a later restore removes it again, see `start`).
            self.start().await?;
            if let Some(name) = self.close_part().await? {
                tracing::warn!(
                    part = name,
                    "a part written after the last checkpoint barrier is committed at end of input, outside a checkpoint"
                );
                self.pending.push((u64::MAX, name));
            }
            self.commit_parts(u64::MAX).await?;
            return self.remove_abandoned_parts().await;
        }
        self.writer().await?;
        let Some((loc, tmp, mut w)) = self.open.take() else {
            return Ok(());
        };
        w.close().await.map_err(|e| Error::storage(&tmp, e))?;
        let fin = format!("{}/part-{}", Self::dir(&loc), self.subtask);
        rename(&loc, &tmp, &fin).await?;
        self.remove_abandoned_parts().await
    }
}

/// `print`: lines to stdout.
#[derive(Debug)]
pub(crate) struct PrintIo;

#[async_trait]
impl SinkIo for PrintIo {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        let mut out = tokio::io::stdout();
        out.write_all(&bytes).await?;
        out.flush().await?;
        Ok(())
    }

    async fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_inputs(dir: &std::path::Path) -> Vec<String> {
        let mut rng = SplitMix::new(7);
        let mut expected = Vec::new();
        for f in 0..4 {
            let mut text = String::new();
            let lines = 1 + rng.next_u64() % 40;
            for l in 0..lines {
                let len = rng.next_u64() % 30;
                let line: String = (0..len).map(|i| (b'a' + ((i + l) % 26) as u8) as char).collect();
                let line = format!("f{f}l{l}:{line}");
                text.push_str(&line);
                expected.push(line);
                if l + 1 < lines || f % 2 == 0 {
                    text.push('\n');
                }
            }
            std::fs::write(dir.join(format!("in-{f}.txt")), text).expect("write input");
        }
        // Empty lines and an empty file are part of the input too.
        std::fs::write(dir.join("in-4.txt"), "\n\nx\r\n\n").expect("write");
        expected.extend(["", "", "x", ""].map(String::from));
        std::fs::write(dir.join("in-5.txt"), "").expect("write");
        std::fs::write(dir.join("_hidden"), "not input\n").expect("write");
        expected.sort();
        expected
    }

    #[tokio::test]
    async fn every_line_is_read_exactly_once_for_any_parallelism_and_chunk_size() {
        let dir = std::env::temp_dir().join(format!("floe-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let expected = write_inputs(&dir);
        let loc = locate(&dir.to_string_lossy(), &BTreeMap::new()).expect("locate");
        let files = list_files(&loc).await.expect("list");
        assert_eq!(files.len(), 6, "hidden files are skipped: {files:?}");
        for p in 1..=5u32 {
            for chunk in [1usize, 3, 7, 64, 1 << 20] {
                let mut got = Vec::new();
                for s in 0..p {
                    let mut r = SplitReader::new(loc.clone(), &files, s, p, chunk);
                    while r
                        .next_chunk(&mut |l| got.push(String::from_utf8_lossy(l).into_owned()))
                        .await
                        .expect("read")
                    {}
                }
                got.sort();
                assert_eq!(got, expected, "p={p} chunk={chunk}");
            }
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// Issue 11, scenario 10: a source restored from a checkpoint reads exactly the lines it had not
    /// emitted, although a file was added to the input directory since (it sorts first, so a file
    /// index into a new listing would point at the wrong file and every split would shift).
    #[tokio::test]
    async fn a_restored_text_source_continues_its_split_when_the_directory_changed() {
        use crate::operators::tests::VecSink;
        let dir = std::env::temp_dir().join(format!("floe-split-restore-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let expected = write_inputs(&dir);
        let source = |subtask, parallelism| TextSource {
            url: dir.to_string_lossy().into_owned(),
            conf: BTreeMap::new(),
            subtask,
            parallelism,
            chunk: 5,
            whole_files: false,
            reader: None,
            restored: None,
        };
        let p = 3;
        let lines: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let mut positions = Vec::new();
        for s in 0..p {
            let mut first = source(s, p);
            let mut out = VecSink(lines.clone());
            for _ in 0..4 {
                first.produce(&mut out).await.expect("read");
            }
            positions.push(first.position());
        }
        std::fs::write(dir.join("a-added-later.txt"), "not in the checkpointed input\n").expect("write");
        for (s, position) in positions.iter().enumerate() {
            let mut restored = source(s as u32, p);
            restored.restore(position).expect("a valid position");
            let mut out = VecSink(lines.clone());
            while restored.produce(&mut out).await.expect("read") {}
        }
        let mut got = lines.lock().expect("lock").clone();
        got.sort();
        assert_eq!(
            got, expected,
            "every checkpointed line exactly once, nothing of the new file"
        );

        // A file of the split that changed since the checkpoint is an error naming it.
        std::fs::write(dir.join("in-0.txt"), "rewritten\n").expect("write");
        let mut restored = source(0, p);
        restored.restore(&positions[0]).expect("a valid position");
        let mut out = VecSink(lines.clone());
        let error = restored
            .produce(&mut out)
            .await
            .expect_err("changed input")
            .to_string();
        assert!(error.contains("in-0.txt changed since the checkpoint"), "{error}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    fn sink_context(restore: Option<crate::checkpoint::TaskRestore>) -> crate::operators::OpContext {
        sink_context_of(0, restore)
    }

    fn sink_context_of(
        subtask: u32,
        restore: Option<crate::checkpoint::TaskRestore>,
    ) -> crate::operators::OpContext {
        crate::operators::OpContext {
            subtask,
            parallelism: 1,
            attempt: 0,
            configuration: BTreeMap::new(),
            metrics: Arc::default(),
            key_groups: 0..128,
            max_parallelism: 128,
            keyed_state: Arc::default(),
            restore,
            checkpointing: true,
            time: None,
            side_outputs: Arc::default(),
        }
    }

    /// The committed files of a sink directory and their contents, by name.
    fn committed(dir: &std::path::Path) -> BTreeMap<String, String> {
        std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("part-"))
            .map(|n| (n.clone(), std::fs::read_to_string(dir.join(&n)).expect("read")))
            .collect()
    }

    /// Issue 11, scenario 5: two attempts of one subtask restored from the same checkpoint (the
    /// older one on a TaskManager declared lost that still runs) write at the same time. The
    /// current attempt's commit makes exactly its own data visible.
    #[tokio::test]
    async fn two_attempts_of_a_sink_subtask_never_touch_each_others_parts() {
        let dir = std::env::temp_dir().join(format!("floe-sink-attempts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let url = dir.to_string_lossy().into_owned();
        // Checkpoint 1 of a first attempt: one part pending.
        let mut first = Box::new(FileSinkIo::new(url.clone(), &sink_context(None)));
        first
            .write(Bytes::from_static(b"before 1\n"))
            .await
            .expect("write");
        let state = first.pre_commit(1).await.expect("pre-commit").expect("state");
        let restore = || {
            Some(crate::checkpoint::TaskRestore {
                checkpoint: 1,
                sources: Vec::new(),
                sinks: vec![state.clone()],
                broadcast: None,
            })
        };
        let mut zombie = Box::new(FileSinkIo::new(url.clone(), &sink_context(restore())));
        let mut current = Box::new(FileSinkIo::new(url.clone(), &sink_context(restore())));
        // Both attempts write the parts that follow the restored checkpoint at the same time.
        zombie
            .write(Bytes::from_static(b"zombie 1\n"))
            .await
            .expect("write");
        current
            .write(Bytes::from_static(b"current 1\n"))
            .await
            .expect("write");
        let _ = zombie.pre_commit(2).await;
        current.pre_commit(2).await.expect("pre-commit");
        let _ = zombie.write(Bytes::from_static(b"zombie 2, longer\n")).await;
        current
            .write(Bytes::from_static(b"current 2\n"))
            .await
            .expect("write");
        current.pre_commit(3).await.expect("pre-commit");
        let _ = zombie.pre_commit(3).await;
        current.commit(3).await.expect("commit");
        let mut contents: Vec<String> = committed(&dir).into_values().collect();
        contents.sort();
        assert_eq!(
            contents,
            vec!["before 1\n", "current 1\n", "current 2\n"],
            "checkpoint 1's part (committed by the restore) and the current attempt's parts only"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// Issue 12: sink states restored into another parallelism. Two subtasks checkpoint a pending
    /// part each, then commit one more each at an end of input that checkpoint does not cover.
    /// Restored into one subtask, both pending parts are committed and both uncovered ones
    /// deleted; restored from there into three, the two added subtasks number parts in lineages
    /// of their own, and restoring one of them again removes only its own uncovered part.
    #[tokio::test]
    async fn sink_states_move_between_parallelisms_without_loss_or_duplicates() {
        let dir = std::env::temp_dir().join(format!("floe-sink-rescale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let url = dir.to_string_lossy().into_owned();
        let restore = |checkpoint, sinks: Vec<String>| {
            Some(crate::checkpoint::TaskRestore {
                checkpoint,
                sources: Vec::new(),
                sinks,
                broadcast: None,
            })
        };
        let mut states = Vec::new();
        for k in 0..2u32 {
            let mut sink = Box::new(FileSinkIo::new(url.clone(), &sink_context_of(k, None)));
            sink.write(Bytes::from(format!("covered {k}\n")))
                .await
                .expect("write");
            states.push(sink.pre_commit(1).await.expect("pre-commit").expect("state"));
            sink.write(Bytes::from(format!("after {k}\n")))
                .await
                .expect("write");
            sink.close().await.expect("close");
        }
        let mut merged = Box::new(FileSinkIo::new(
            url.clone(),
            &sink_context_of(0, restore(1, states)),
        ));
        merged
            .write(Bytes::from_static(b"merged\n"))
            .await
            .expect("write");
        let state = merged.pre_commit(2).await.expect("pre-commit").expect("state");
        merged.commit(2).await.expect("commit");
        // An attempt of old subtask 1 cancelled by the rescale left a part in progress.
        std::fs::write(dir.join(".part-1-9-cancelled.inprogress"), "abandoned\n").expect("write");
        assert!(state.contains("\"taken_over\":[\"1\"]"), "{state}");
        let mut contents: Vec<String> = committed(&dir).into_values().collect();
        contents.sort();
        assert_eq!(contents, vec!["covered 0\n", "covered 1\n", "merged\n"]);

        // Into three: subtask 0 continues, subtasks 1 and 2 are new (no state).
        let mut added = Box::new(FileSinkIo::new(
            url.clone(),
            &sink_context_of(2, restore(2, Vec::new())),
        ));
        added
            .write(Bytes::from_static(b"added, uncovered\n"))
            .await
            .expect("write");
        added.close().await.expect("close");
        let names: Vec<String> = committed(&dir).into_keys().collect();
        assert!(names.iter().any(|n| n.starts_with("part-2c2-0-")), "{names:?}");
        // The added subtask restored from checkpoint 2 again: its uncovered part goes, nothing else.
        let again = Box::new(FileSinkIo::new(
            url.clone(),
            &sink_context_of(2, restore(2, Vec::new())),
        ));
        again.close().await.expect("close");
        let mut contents: Vec<String> = committed(&dir).into_values().collect();
        contents.sort();
        assert_eq!(contents, vec!["covered 0\n", "covered 1\n", "merged\n"]);
        assert!(state.contains("\"lineage\":\"0\""), "{state}");
        // Subtask 0 of three continues lineage 0 and, at its end, removes what old subtask 1's
        // cancelled attempt left in progress: no hidden part is left behind.
        let last = Box::new(FileSinkIo::new(
            url.clone(),
            &sink_context_of(0, restore(2, vec![state.clone()])),
        ));
        last.close().await.expect("close");
        let hidden: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".inprogress"))
            .collect();
        assert!(hidden.is_empty(), "{hidden:?}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[tokio::test]
    async fn whole_file_splits_give_each_file_to_one_subtask_in_order() {
        let dir = std::env::temp_dir().join(format!("floe-whole-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let mut expected = write_inputs(&dir);
        let mut got = Vec::new();
        for subtask in 0..2 {
            let lines: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
            let mut source = TextSource {
                url: dir.to_string_lossy().into_owned(),
                conf: BTreeMap::new(),
                subtask,
                parallelism: 2,
                chunk: 7,
                whole_files: true,
                reader: None,
                restored: None,
            };
            let mut out = crate::operators::tests::VecSink(lines.clone());
            while source.produce(&mut out).await.expect("produce") {}
            let lines = lines.lock().expect("lock").clone();
            // Files in-0, in-2, in-4 (subtask 0) or in-1, in-3, in-5, each whole and in order.
            let files: Vec<u32> = lines
                .iter()
                .filter_map(|l| l.strip_prefix('f')?.split('l').next()?.parse().ok())
                .collect();
            assert!(files.iter().all(|f| f % 2 == subtask), "{files:?}");
            assert!(files.windows(2).all(|w| w[0] <= w[1]), "file by file: {files:?}");
            for f in files.iter().collect::<std::collections::BTreeSet<_>>() {
                let numbers: Vec<u64> = lines
                    .iter()
                    .filter_map(|l| l.strip_prefix(&format!("f{f}l"))?.split(':').next()?.parse().ok())
                    .collect();
                assert_eq!(
                    numbers,
                    (0..numbers.len() as u64).collect::<Vec<_>>(),
                    "file {f} in order"
                );
            }
            got.extend(lines);
        }
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "every line once");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[tokio::test]
    async fn a_source_restored_from_several_splits_reads_each_once() {
        // Two generator streams of another parallelism's subtasks, taken over by one subtask.
        let make = || GeneratorSource {
            seed: 3,
            stride: Stride::of_subtask(0, 1, Some(0)),
            pacer: Pacer::default(),
            vocabulary: generator_vocabulary(),
            metrics: Arc::default(),
        };
        let mut a = make();
        a.restore("next=10,step=1,end=2000").expect("restore");
        let mut b = make();
        b.restore("next=2500,step=1,end=4000").expect("restore");
        let mut multi = MultiSource::new(vec![a, b]);
        assert_eq!(
            multi.position(),
            r#"["next=10,step=1,end=2000","next=2500,step=1,end=4000"]"#
        );
        let items: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let mut out = crate::operators::tests::VecSink(items.clone());
        while multi.produce(&mut out).await.expect("produce") {}
        let (cdf, words) = generator_vocabulary();
        let mut expected: Vec<String> = (10..2000)
            .chain(2500..4000)
            .map(|i| generator_line(3, i, &cdf, &words))
            .collect();
        let mut got = items.lock().expect("lock").clone();
        expected.sort();
        got.sort();
        assert_eq!(got, expected);
        assert_eq!(multi.position(), "next=4000,step=1,end=4000");
        assert_eq!(
            crate::checkpoint::source_positions(r#"["a","b"]"#),
            vec!["a".to_string(), "b".to_string()]
        );
        assert_eq!(
            crate::checkpoint::source_positions("next=1"),
            vec!["next=1".to_string()]
        );
    }

    #[test]
    fn generator_is_deterministic_and_zipf_skewed() {
        let (cdf, words) = generator_vocabulary();
        let a = generator_line(1, 5, &cdf, &words);
        assert_eq!(a, generator_line(1, 5, &cdf, &words));
        let mut top = 0;
        let mut total = 0;
        for i in 0..2000 {
            for w in generator_line(1, i, &cdf, &words).split(' ') {
                total += 1;
                top += usize::from(w == "kaka");
            }
        }
        // Rank 1 of Zipf(1.0) over 10,000 words has probability ~0.102.
        assert!(top * 20 > total && top * 6 < total, "{top} of {total}");
        assert_eq!(generator_word(0), "kaka");
        assert_eq!(generator_word(1025), "lokaka");
        let distinct: std::collections::HashSet<String> =
            (0..GENERATOR_VOCABULARY).map(generator_word).collect();
        assert_eq!(distinct.len(), GENERATOR_VOCABULARY);
    }
}
