//! Seeded test input: the lines of the DataStream data generator (Zipf-distributed words over a
//! 10,000-word vocabulary, like natural language), written to a file. Every 7th line gets a capital
//! letter and punctuation so the tokenizer has work. Same seed, same bytes.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use floe_datastream::{generator_line, generator_vocabulary};

/// Writes at least `bytes` bytes to a file and returns the size written.
pub fn write_words(path: &Path, bytes: u64, seed: u64) -> anyhow::Result<u64> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let written = generate(&mut out, bytes, seed).with_context(|| format!("writing {}", path.display()))?;
    out.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(written)
}

/// Writes at least `bytes` bytes to an object (`s3://bucket/data/words.txt`, credentials and
/// endpoint from the usual AWS environment variables) and returns the size written: the input of
/// a job in a cluster, made from a laptop.
pub fn upload_words(url: &str, bytes: u64, seed: u64) -> anyhow::Result<u64> {
    let (dir, name) = url
        .rsplit_once('/')
        .filter(|(dir, name)| !name.is_empty() && dir.contains("://"))
        .with_context(|| {
            format!("--output {url}: expected an object URL such as s3://bucket/data/words.txt")
        })?;
    let mut text = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0).saturating_add(1 << 10));
    let written = generate(&mut text, bytes, seed)?;
    let store = floe_storage::ObjectStore::open(dir, &Default::default())
        .with_context(|| format!("--output {url}"))?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(store.put(name, text))
        .with_context(|| format!("writing {url}"))?;
    Ok(written)
}

fn generate(out: &mut impl Write, bytes: u64, seed: u64) -> std::io::Result<u64> {
    let (cdf, words) = generator_vocabulary();
    let mut written = 0u64;
    let mut index = 0u64;
    while written < bytes {
        let mut line = generator_line(seed, index, &cdf, &words);
        if index % 7 == 3 {
            // "word word" -> "Word, word!"
            if let Some(first) = line.get(..1).map(str::to_ascii_uppercase) {
                line.replace_range(..1, &first);
            }
            line = line.replacen(' ', ", ", 1);
            line.push('!');
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
        written += line.len() as u64;
        index += 1;
    }
    Ok(written)
}
