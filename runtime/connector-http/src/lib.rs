//! HTTP lookups (issue 34, item 3): [`HttpLookup`], an [`AsyncFunction`] that enriches each key
//! with the body of a GET request, for [`floe_datastream::AsyncDataStream`]. Many requests are in
//! flight per subtask over one connection pool, none blocks the task, and those in flight at a
//! checkpoint are issued again after a restore.
//!
//! The built-in job `http-enrich` ([`register`]) runs it: generated words, each looked up, counted
//! per word and answer into files (exactly-once).

use std::time::Duration;

use floe_datastream::{
    ArgKind, ArgSpec, AsyncDataStream, AsyncFunction, AsyncRetryStrategy, Collector, Error, FunctionResult,
    JobRegistry, JobSpec, Result, RuntimeContext, StreamExecutionEnvironment,
};

/// GET `{base}{key}` per key (the key percent-encoded): `200` gives `(key, body)`, `404` no
/// result (the record is dropped: nothing is known of it), any other status or a transport error
/// fails the request (the operator's retry strategy applies).
#[derive(Clone, Debug)]
pub struct HttpLookup {
    base: String,
    /// Made in `open`, once per subtask: a pool of keep-alive connections its requests share.
    client: Option<reqwest::Client>,
}

impl HttpLookup {
    /// A lookup under `base` (`http://host:port/path/`; the key is appended as it is given).
    pub fn new(base: &str) -> Result<Self> {
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::argument(
                "--url",
                format!("expected an http:// or https:// URL, got {base:?}"),
            ));
        }
        Ok(HttpLookup {
            base: base.to_string(),
            client: None,
        })
    }
}

impl AsyncFunction<String, (String, String)> for HttpLookup {
    fn open(&mut self, _: &RuntimeContext) -> FunctionResult {
        self.client = Some(
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .build()?,
        );
        Ok(())
    }

    async fn async_invoke(&self, key: String) -> FunctionResult<Vec<(String, String)>> {
        let client = self.client.as_ref().ok_or("the lookup was not opened")?;
        let url = format!("{}{}", self.base, percent_encode(&key));
        let response = client
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        match response.status().as_u16() {
            200 => {
                let body = response.text().await.map_err(|e| format!("GET {url}: {e}"))?;
                Ok(vec![(key, body.trim_end().to_string())])
            }
            404 => Ok(Vec::new()),
            status => Err(format!("GET {url}: HTTP {status}").into()),
        }
    }
}

/// `key` as one URL path segment: everything but RFC 3986's unreserved characters as `%XX`.
fn percent_encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

const HTTP_ENRICH: JobSpec = JobSpec {
    description: "generator lines -> words, each looked up with GET {url}{word} (async I/O) -> counts per word:answer into files (word:answer<TAB>count, exactly-once)",
    args: &[
        ArgSpec::required(
            "url",
            ArgKind::Text,
            "the lookup service: each word is appended to it",
        ),
        ArgSpec::required("output", ArgKind::Location, "where the counts go"),
        ArgSpec::optional(
            "records",
            ArgKind::Count,
            Some("10000"),
            "lines to generate; 0: unbounded",
        ),
        ArgSpec::optional("rate", ArgKind::Rate, None, "lines per second"),
        ArgSpec::optional("seed", ArgKind::Count, Some("42"), "the generator's seed"),
        ArgSpec::optional(
            "capacity",
            ArgKind::Positive,
            Some("100"),
            "requests in flight per subtask",
        ),
        ArgSpec::optional(
            "timeout-ms",
            ArgKind::Positive,
            Some("10000"),
            "a word's requests, retries included, in milliseconds",
        ),
        ArgSpec::optional(
            "attempts",
            ArgKind::Positive,
            Some("3"),
            "tries per word (100 ms apart)",
        ),
        ArgSpec::optional(
            "order",
            ArgKind::OneOf(&["unordered", "ordered"]),
            Some("unordered"),
            "results as they complete, or in input order",
        ),
    ],
};

/// Registers `http-enrich`.
pub fn register(registry: &mut JobRegistry) {
    registry.register_declared("http-enrich", HTTP_ENRICH, http_enrich);
}

fn http_enrich(env: &mut StreamExecutionEnvironment, args: &[String]) -> Result<()> {
    let a = HTTP_ENRICH.parse("http-enrich", args)?;
    let lookup = HttpLookup::new(a.text("url")?)?;
    let records = a.u64("records")?;
    let words = env
        .data_generator(
            a.u64("seed")?,
            (records > 0).then_some(records),
            a.opt_f64("rate")?,
        )
        .uid("lines")
        .flat_map(|line: String, out: &mut dyn Collector<String>| {
            for word in line.split(' ') {
                out.collect(word.to_string());
            }
        })
        .name("Tokenizer");
    let timeout = Duration::from_millis(a.u64("timeout-ms")?);
    let capacity = a.u64("capacity")? as usize;
    let retry = AsyncRetryStrategy::fixed_delay(a.u64("attempts")? as u32, Duration::from_millis(100));
    let answers = if a.text("order")? == "ordered" {
        AsyncDataStream::ordered_wait_with_retry(&words, lookup, timeout, capacity, retry)
    } else {
        AsyncDataStream::unordered_wait_with_retry(&words, lookup, timeout, capacity, retry)
    };
    answers
        .uid("lookup")
        .map(|(word, answer): (String, String)| (format!("{word}:{answer}"), 1u64))
        .key_by_ref(|p: &(String, u64)| &p.0)
        .sum()
        .uid("counts")
        .sink_to_file(a.text("output")?)
        .uid("out");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_one_path_segment() {
        assert_eq!(percent_encode("abc-1.2_~"), "abc-1.2_~");
        assert_eq!(percent_encode("a b/c?d%"), "a%20b%2Fc%3Fd%25");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }

    #[test]
    fn a_url_that_is_not_http_is_refused_naming_the_argument() {
        let e = HttpLookup::new("ftp://x/").unwrap_err().to_string();
        assert!(
            e.contains("--url") && e.contains("expected an http:// or https:// URL"),
            "{e}"
        );
    }
}
