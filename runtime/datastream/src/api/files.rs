//! File sources: lines of text files, and records parsed from them (JSON lines with serde, or a
//! parser of the job's own). A line that does not parse fails the job at once, naming the file,
//! the line's number and what is wrong (issue 34, item 4): no restart could read it differently.

use std::sync::Arc;

use super::*;
use crate::io::{Parser, TextSource};

impl StreamExecutionEnvironment {
    /// Lines of a file, or of the files of a directory (`/path`, `file:///path`, `s3://bucket/prefix`),
    /// split by byte ranges across the subtasks.
    pub fn read_text_file(&self, url: &str) -> DataStream<String> {
        self.text_source(url, false, io::lines(), "Source: Text")
    }

    /// Lines of the files of a directory, each file read whole by one subtask (file `i` of the
    /// sorted listing by subtask `i mod p`), in order: for files whose order matters, e.g. each
    /// in event-time order (Flink's file source with a format it does not split).
    pub fn read_text_files_whole(&self, url: &str) -> DataStream<String> {
        self.text_source(url, true, io::lines(), "Source: Text")
    }

    /// Records of a file or directory of text, one a line, as `parse` makes them (the lines split
    /// by byte ranges across the subtasks, as [`StreamExecutionEnvironment::read_text_file`];
    /// `whole_files`: as [`StreamExecutionEnvironment::read_text_files_whole`]). A line `parse`
    /// refuses, or that is not UTF-8, fails the job without restarts: "bad record in FILE, line
    /// N: REASON".
    pub fn read_text_records<T: Data>(
        &self,
        url: &str,
        whole_files: bool,
        parse: impl Fn(&str) -> std::result::Result<T, String> + Send + Sync + 'static,
    ) -> DataStream<T> {
        let parse: Parser<T> = Arc::new(move |line: &[u8]| {
            let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8 text ({e})"))?;
            parse(text)
        });
        self.text_source(url, whole_files, parse, "Source: Records")
    }

    /// Records of a file or directory of JSON lines (one JSON object a line, Flink's `json`
    /// format), deserialized with serde. A line that does not deserialize fails the job without
    /// restarts, naming the file, the line and the field: "bad record in FILE, line N: field
    /// `bid.price`: invalid type: string \"x\", expected u64 at line 1 column 40".
    pub fn read_json_lines<T: Data + serde::de::DeserializeOwned>(&self, url: &str) -> DataStream<T> {
        let parse: Parser<T> = Arc::new(|line: &[u8]| io::json_record(line));
        self.text_source(url, false, parse, "Source: JSON lines")
    }

    fn text_source<T: Data>(
        &self,
        url: &str,
        whole_files: bool,
        parse: Parser<T>,
        name: &str,
    ) -> DataStream<T> {
        let url = url.to_string();
        let url_for_size = url.clone();
        let factory: SourceFactory = Arc::new(move |ctx: &OpContext, chain: AnyOp| {
            let source = || TextSource {
                url: url.clone(),
                conf: ctx.configuration.clone(),
                subtask: ctx.subtask,
                parallelism: ctx.parallelism,
                chunk: io::DEFAULT_READ_CHUNK,
                whole_files,
                reader: None,
                restored: None,
                parse: parse.clone(),
            };
            source_head(ctx, source, chain)
        });
        let stream = self.add_source("source", name.into(), Par::Default, factory);
        lock(&self.shared).nodes[stream.node].source_input = Some(url_for_size);
        stream
    }
}
