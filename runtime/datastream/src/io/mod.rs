//! Sources and sinks: text files and directories on a file system or S3 (through opendal), the
//! seeded word generator, sequences and collections; part-file and stdout sinks.
//!
//! `mod.rs`: locations, listing, the `Source` trait and several splits read as one; `text.rs` the
//! text file source and its splits; `generator.rs` the generated sources; `sink.rs` the part-file
//! and stdout sinks.

use std::collections::BTreeMap;

use async_trait::async_trait;
use opendal::Operator;

use crate::error::{Error, Result};
use crate::operators::Op;

mod generator;
pub(crate) mod sink;
mod text;

pub(crate) use generator::*;
pub use generator::{GENERATOR_VOCABULARY, generator_line, generator_vocabulary, generator_word};
pub(crate) use sink::*;
pub(crate) use text::*;

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

/// The object-storage URL of a location as Floe's location arguments take it (Flink's paths): a URL
/// as it is (`s3a://` as `s3://`), a plain path as a local file: `/data/out` is `file:///data/out`,
/// a relative one is taken against this process's working directory.
pub fn location_url(location: &str) -> Result<String> {
    Ok(match location.split_once("://") {
        Some(("s3a", rest)) => format!("s3://{rest}"),
        Some(_) => location.to_string(),
        None => {
            let absolute = if location.starts_with('/') {
                std::path::PathBuf::from(location)
            } else {
                std::env::current_dir()?.join(location)
            };
            format!("file://{}", absolute.display())
        }
    })
}

/// Opens `s3://bucket/prefix`, `file:///path` or a plain (absolute or relative) path, through the one
/// object-storage wrapper (`floe-storage`: endpoint and keys from configuration or the environment).
pub(crate) fn locate(url: &str, conf: &BTreeMap<String, String>) -> Result<Location> {
    check_location(url)?;
    let storage_url = location_url(url)?;
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
    /// The source has nothing to say about event time now (every split it reads has gone quiet
    /// for its idle timeout, or it reads none): downstream watermarks go on without it until it
    /// is active again (Flink's `WatermarkStatus.IDLE`).
    fn idle(&self) -> bool {
        false
    }
    /// The position checkpoint `checkpoint` records: [`Source::position`], unless the source
    /// remembers what it snapshotted for the checkpoint's completion.
    fn snapshot(&mut self, checkpoint: u64) -> String {
        let _ = checkpoint;
        self.position()
    }
    /// Checkpoint `checkpoint` (and every earlier one) completed.
    async fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }
    /// The subtask ends (its input ended, or it stopped with a savepoint): what the source still
    /// has in flight for completed checkpoints is finished before the task reports its end.
    async fn close(&mut self) -> Result<()> {
        Ok(())
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
        // An idle split holds nothing back while another is active.
        let active = self.sources.iter().filter(|s| !s.idle());
        active.map(|s| s.watermark()).min().flatten()
    }

    fn idle(&self) -> bool {
        !self.sources.is_empty() && self.sources.iter().all(|s| s.idle())
    }

    fn snapshot(&mut self, checkpoint: u64) -> String {
        match self.sources.as_mut_slice() {
            [one] => one.snapshot(checkpoint),
            many => serde_json::to_string(
                &many
                    .iter_mut()
                    .map(|s| s.snapshot(checkpoint))
                    .collect::<Vec<_>>(),
            )
            .unwrap_or_default(),
        }
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        for s in &mut self.sources {
            s.notify_checkpoint_complete(checkpoint).await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        for s in &mut self.sources {
            s.close().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
