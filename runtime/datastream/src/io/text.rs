//! The text file source: byte-range splits of the files of a location, read line by line, each
//! line emitted as it is or parsed into a record ([`Parser`]). A line that does not parse fails
//! the source with [`Error::BadRecord`], naming the file, the line's number and the parser's
//! reason: a restart would read the same line again.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::operators::Op;

use super::*;

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
    /// A line `emit` refuses is an [`Error::BadRecord`] naming its file and line number.
    pub(crate) async fn next_chunk(&mut self, emit: &mut Emit<'_>) -> Result<bool> {
        let Some((path, len, _, le)) = self.files.get(self.file).cloned() else {
            return Ok(false);
        };
        if self.pos >= len {
            // End of file: an unterminated last line is still a line.
            if !self.skipping
                && self.line_start < len
                && self.line_start <= le
                && let Err(message) = emit(strip_cr(&self.carry))
            {
                return Err(self.bad_record(&path, message).await);
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
            let emitted = if self.carry.is_empty() {
                emit(strip_cr(&rest[..i]))
            } else {
                self.carry.extend_from_slice(&rest[..i]);
                let emitted = emit(strip_cr(&self.carry));
                self.carry.clear();
                emitted
            };
            if let Err(message) = emitted {
                return Err(self.bad_record(&path, message).await);
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

    /// The refused line starting at `self.line_start` of `path`: its number is counted from the
    /// file's start (a split does not know how many lines precede it; this read happens once, as
    /// the job fails).
    async fn bad_record(&self, path: &str, message: String) -> Error {
        // As the user named it: the location's URL, and the file's name under it for a directory.
        let dir = self.loc.path.trim_end_matches('/');
        let file = match path.strip_prefix(dir).map(|p| p.trim_start_matches('/')) {
            Some("") => self.loc.url.clone(),
            Some(name) if !dir.is_empty() => format!("{}/{name}", self.loc.url.trim_end_matches('/')),
            _ => format!("{}/{path}", self.loc.url.trim_end_matches('/')),
        };
        let mut newlines = 0u64;
        let mut at = 0u64;
        while at < self.line_start {
            let end = (at + self.chunk as u64).min(self.line_start);
            match self.loc.op.read_with(path).range(at..end).await {
                Ok(buf) => newlines += memchr::memchr_iter(b'\n', &buf.to_bytes()).count() as u64,
                Err(e) => {
                    return Error::BadRecord {
                        file,
                        line: 0,
                        message: format!(
                            "{message} (at byte {}; its line number is unknown: {e})",
                            self.line_start
                        ),
                    };
                }
            }
            at = end;
        }
        Error::BadRecord {
            file,
            line: newlines + 1,
            message,
        }
    }
}

/// Turns one line (without its newline) into a record; the error says what is wrong with it.
pub type Parser<T> = std::sync::Arc<dyn Fn(&[u8]) -> std::result::Result<T, String> + Send + Sync>;

/// Lines as they are (invalid UTF-8 replaced, as a text file is read whatever it holds).
pub(crate) fn lines() -> Parser<String> {
    std::sync::Arc::new(|line| Ok(String::from_utf8_lossy(line).into_owned()))
}

/// One JSON line as a `T`; the error names the field path where deserializing stopped. The
/// path is tracked only once a line failed (parsed again): tracking it costs every record.
pub(crate) fn json_record<T: serde::de::DeserializeOwned>(line: &[u8]) -> std::result::Result<T, String> {
    if let Ok(value) = serde_json::from_slice(line) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(line);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        if path == "." || path.is_empty() {
            e.inner().to_string()
        } else {
            format!("field `{path}`: {}", e.inner())
        }
    })?;
    deserializer
        .end()
        .map_err(|e| format!("more after the record: {e}"))?;
    Ok(value)
}

/// What a [`SplitReader`] hands each line to: `Err` refuses it (it does not parse).
pub(crate) type Emit<'a> = dyn FnMut(&[u8]) -> std::result::Result<(), String> + Send + 'a;

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// `read_text_file` and the sources of parsed lines: the records of this subtask's split.
pub(crate) struct TextSource<T> {
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
    pub parse: Parser<T>,
}

impl<T> std::fmt::Debug for TextSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextSource")
            .field("url", &self.url)
            .field("subtask", &self.subtask)
            .field("parallelism", &self.parallelism)
            .field("reader", &self.reader)
            .finish_non_exhaustive()
    }
}

impl<T> TextSource<T> {
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
impl<T: Send + 'static> Source<T> for TextSource<T> {
    async fn produce(&mut self, out: &mut dyn Op<T>) -> Result<bool> {
        self.open().await?;
        let Some(reader) = self.reader.as_mut() else {
            return Ok(false);
        };
        let parse = &self.parse;
        reader
            .next_chunk(&mut |line| {
                out.collect(parse(line)?);
                Ok(())
            })
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
