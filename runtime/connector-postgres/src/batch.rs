//! Rows gathered for one statement: each frame the sink's encoder made (the key's literals, a
//! NUL, the row; see `encode_row`) becomes a row, and in an upsert a later row of a key replaces
//! the earlier one (one `INSERT ... ON CONFLICT DO UPDATE` may not touch a row twice).

use std::collections::HashMap;

/// The rows of the next statement, in the order their keys first came.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// Upsert: a key's later row replaces its earlier one. Append: every row is kept.
    by_key: bool,
    rows: Vec<String>,
    /// A buffered key's row in `rows` (upsert only).
    index: HashMap<String, usize>,
}

impl Batch {
    pub(crate) fn new(by_key: bool) -> Self {
        Batch {
            by_key,
            ..Batch::default()
        }
    }

    /// Adds a frame's row; `Err` with the encoder's message for a row it refused (the wrong
    /// number of values), or for a frame that is not text.
    pub(crate) fn push(&mut self, frame: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(frame).map_err(|e| e.to_string())?;
        let (key, row) = check(text)?;
        if !self.by_key {
            self.rows.push(row.to_string());
            return Ok(());
        }
        match self.index.get(key) {
            Some(&i) => self.rows[i] = row.to_string(),
            None => {
                self.index.insert(key.to_string(), self.rows.len());
                self.rows.push(row.to_string());
            }
        }
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub(crate) fn rows(&self) -> impl Iterator<Item = &str> {
        self.rows.iter().map(String::as_str)
    }

    pub(crate) fn clear(&mut self) {
        self.rows.clear();
        self.index.clear();
    }
}

/// A frame's key and row, or the encoder's message for a row it refused (a frame that starts
/// with a NUL and no row after it).
pub(crate) fn check(text: &str) -> Result<(&str, &str), String> {
    let (key, row) = text.split_once('\0').unwrap_or((text, ""));
    if key.is_empty() && !row.starts_with('(') {
        return Err(row.to_string());
    }
    Ok((key, row))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upsert_batch_keeps_a_key_s_last_row_and_an_append_batch_every_row() {
        let mut upsert = Batch::new(true);
        let mut append = Batch::new(false);
        for frame in ["'a',\0('a', 1)", "'b',\0('b', 1)", "'a',\0('a', 2)"] {
            upsert.push(frame.as_bytes()).unwrap();
            append.push(frame.as_bytes()).unwrap();
        }
        assert_eq!(upsert.rows().collect::<Vec<_>>(), ["('a', 2)", "('b', 1)"]);
        assert_eq!(append.len(), 3);
        assert_eq!(
            upsert.push(b"\0a row has 1 values, the sink's columns are 2"),
            Err("a row has 1 values, the sink's columns are 2".to_string())
        );
        // An append row has no key: a NUL, then the row.
        append.push(b"\0('c', 1)").unwrap();
        assert_eq!(append.rows().last(), Some("('c', 1)"));
        upsert.clear();
        assert!(upsert.is_empty());
    }
}
