//! The SQL the sink sends, built as text (the simple-query protocol: one round trip per batch of
//! rows, no statement to prepare per column type). Values are written as SQL literals, quoted as
//! PostgreSQL's standard strings require (`'` doubled; the connection sets
//! `standard_conforming_strings`, so a backslash is an ordinary character), and identifiers are
//! double-quoted, so no value or name can end the statement early.

use std::fmt::Write;

/// A column's value in a row the sink writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self {
                Value::Int(i64::from(v))
            }
        }
    )*};
}
int_value!(i8, i16, i32, i64, u8, u16, u32);

/// A `u64` above `i64::MAX` (PostgreSQL has no unsigned type) is written as text, which a
/// `numeric` column takes and a `bigint` column refuses, naming the value.
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        i64::try_from(v).map_or_else(|_| Value::Text(v.to_string()), Value::Int)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Value::Float(f64::from(v))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

impl Value {
    /// The value as a SQL literal.
    pub fn write_literal(&self, out: &mut String) {
        match self {
            Value::Null => out.push_str("NULL"),
            Value::Bool(b) => out.push_str(if *b { "TRUE" } else { "FALSE" }),
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::Float(f) if f.is_nan() => out.push_str("'NaN'::float8"),
            Value::Float(f) if f.is_infinite() => out.push_str(if *f > 0.0 {
                "'Infinity'::float8"
            } else {
                "'-Infinity'::float8"
            }),
            // Debug keeps a decimal point (`1.0`), so the literal is numeric, never an integer.
            Value::Float(f) => {
                let _ = write!(out, "{f:?}");
            }
            Value::Text(s) => quote(out, s, '\''),
        }
    }
}

/// `s` between `q`s, each `q` inside doubled (a string literal with `'`, an identifier with `"`).
/// A NUL cannot be in a PostgreSQL text value; it is dropped here, where the server would refuse
/// the whole batch.
fn quote(out: &mut String, s: &str, q: char) {
    out.push(q);
    for c in s.chars() {
        match c {
            '\0' => {}
            c if c == q => {
                out.push(q);
                out.push(q);
            }
            c => out.push(c),
        }
    }
    out.push(q);
}

/// `"name"`.
pub(crate) fn identifier(out: &mut String, name: &str) {
    quote(out, name, '"')
}

/// The table, possibly schema-qualified (`schema.table`): each part quoted.
fn table_name(out: &mut String, table: &str) {
    for (i, part) in table.split('.').enumerate() {
        if i > 0 {
            out.push('.');
        }
        identifier(out, part);
    }
}

/// A row's values as `(v1, v2, ...)`.
pub(crate) fn row(values: &[Value], out: &mut String) {
    out.push('(');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        v.write_literal(out);
    }
    out.push(')');
}

/// An insert's text around its rows: `INSERT INTO t (c...) VALUES `, and for an upsert ` ON
/// CONFLICT (key...) DO UPDATE SET c = EXCLUDED.c` for the columns outside the key (`DO NOTHING`
/// when every column is in it).
#[derive(Debug, Clone)]
pub(crate) struct Insert {
    prefix: String,
    suffix: String,
}

impl Insert {
    /// An upsert by `key`, or a plain insert when `key` is empty.
    pub(crate) fn new(table: &str, columns: &[String], key: &[String]) -> Self {
        let mut prefix = String::from("INSERT INTO ");
        table_name(&mut prefix, table);
        prefix.push_str(" (");
        list(&mut prefix, columns.iter());
        prefix.push_str(") VALUES ");
        let mut suffix = String::new();
        if key.is_empty() {
            return Insert { prefix, suffix };
        }
        suffix.push_str(" ON CONFLICT (");
        list(&mut suffix, key.iter());
        let rest: Vec<&String> = columns.iter().filter(|c| !key.contains(c)).collect();
        if rest.is_empty() {
            suffix.push_str(") DO NOTHING");
        } else {
            suffix.push_str(") DO UPDATE SET ");
            for (i, c) in rest.iter().enumerate() {
                if i > 0 {
                    suffix.push_str(", ");
                }
                identifier(&mut suffix, c);
                suffix.push_str(" = EXCLUDED.");
                identifier(&mut suffix, c);
            }
        }
        Insert { prefix, suffix }
    }

    /// The statement for `rows` (each as [`row`] wrote it).
    pub(crate) fn statement<'a>(&self, rows: impl Iterator<Item = &'a str>) -> String {
        let mut sql = self.prefix.clone();
        for (i, r) in rows.enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(r);
        }
        sql.push_str(&self.suffix);
        sql
    }
}

/// The statements on a transactional sink's marker: one row per sink, job run and subtask
/// (`sink`, `run`, `subtask`), holding the last checkpoint whose rows that subtask committed.
#[derive(Debug, Clone)]
pub(crate) struct Marker {
    table: String,
    /// `sink = '..' AND run = '..' AND subtask = n`.
    row: String,
    /// `'..', '..', n`.
    values: String,
}

impl Marker {
    pub(crate) fn new(table: &str, sink: &str, run: &str, subtask: u32) -> Self {
        let mut quoted = String::new();
        table_name(&mut quoted, table);
        let (mut s, mut r) = (String::new(), String::new());
        Value::from(sink).write_literal(&mut s);
        Value::from(run).write_literal(&mut r);
        Marker {
            table: quoted,
            row: format!("sink = {s} AND run = {r} AND subtask = {subtask}"),
            values: format!("{s}, {r}, {subtask}"),
        }
    }

    /// Whether the marker table is there (`t` or `f`): a user who may not create tables can
    /// use one made for it (`CREATE TABLE IF NOT EXISTS` checks the privilege first).
    pub(crate) fn exists(&self) -> String {
        let mut name = String::new();
        Value::from(self.table.as_str()).write_literal(&mut name);
        format!("SELECT to_regclass({name}) IS NOT NULL")
    }

    /// Creates the marker table if it is not there.
    pub(crate) fn create(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (sink text NOT NULL, run text NOT NULL, \
             subtask integer NOT NULL, checkpoint bigint NOT NULL, PRIMARY KEY (sink, run, subtask))",
            self.table
        )
    }

    /// Inside a transaction: makes the row if it is not there and locks it, answering its
    /// checkpoint. A second writer of the same row (an attempt declared lost that still runs)
    /// waits here until the first commits or rolls back, then reads what it left.
    pub(crate) fn claim(&self) -> String {
        format!(
            "INSERT INTO {t} (sink, run, subtask, checkpoint) VALUES ({v}, 0) ON CONFLICT DO NOTHING; \
             SELECT checkpoint FROM {t} WHERE {w} FOR UPDATE",
            t = self.table,
            v = self.values,
            w = self.row
        )
    }

    /// Inside the same transaction: the checkpoint whose rows it commits.
    pub(crate) fn set(&self, checkpoint: u64) -> String {
        format!(
            "UPDATE {} SET checkpoint = {checkpoint} WHERE {}",
            self.table, self.row
        )
    }
}

/// `"a", "b"`.
fn list<'a>(out: &mut String, names: impl Iterator<Item = &'a String>) {
    for (i, c) in names.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        identifier(out, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn literal(v: Value) -> String {
        let mut s = String::new();
        v.write_literal(&mut s);
        s
    }

    #[test]
    fn literals_quote_what_could_end_them() {
        assert_eq!(literal("it's".into()), "'it''s'");
        assert_eq!(literal("a\\b\n\"c\"".into()), "'a\\b\n\"c\"'");
        assert_eq!(literal("nul\0here".into()), "'nulhere'");
        assert_eq!(literal(Value::Null), "NULL");
        assert_eq!(literal(None::<i64>.into()), "NULL");
        assert_eq!(literal(3u64.into()), "3");
        assert_eq!(literal(u64::MAX.into()), "'18446744073709551615'");
        assert_eq!(literal(1.0f64.into()), "1.0");
        assert_eq!(literal(f64::NAN.into()), "'NaN'::float8");
        assert_eq!(literal(f64::NEG_INFINITY.into()), "'-Infinity'::float8");
        assert_eq!(literal(true.into()), "TRUE");
    }

    #[test]
    fn an_upsert_updates_the_columns_outside_the_key_and_an_append_inserts() {
        let cols = ["word".to_string(), "n".to_string()];
        let key = ["word".to_string()];
        let rows: Vec<String> = [vec!["a".into(), 1i64.into()], vec!["b\"".into(), 2i64.into()]]
            .iter()
            .map(|values| {
                let mut r = String::new();
                row(values, &mut r);
                r
            })
            .collect();
        assert_eq!(
            Insert::new("public.counts", &cols, &key).statement(rows.iter().map(String::as_str)),
            "INSERT INTO \"public\".\"counts\" (\"word\", \"n\") VALUES ('a', 1), ('b\"', 2) \
             ON CONFLICT (\"word\") DO UPDATE SET \"n\" = EXCLUDED.\"n\""
        );
        assert_eq!(
            Insert::new("t", &key, &key).statement(["('a')"].into_iter()),
            "INSERT INTO \"t\" (\"word\") VALUES ('a') ON CONFLICT (\"word\") DO NOTHING"
        );
        assert_eq!(
            Insert::new("t", &cols, &[]).statement(["('a', 1)", "('a', 2)"].into_iter()),
            "INSERT INTO \"t\" (\"word\", \"n\") VALUES ('a', 1), ('a', 2)"
        );
    }

    #[test]
    fn a_marker_row_is_named_by_sink_run_and_subtask() {
        let m = Marker::new("floe_sink_commits", "it's", "run1", 3);
        assert_eq!(
            m.set(7),
            "UPDATE \"floe_sink_commits\" SET checkpoint = 7 WHERE sink = 'it''s' AND run = 'run1' AND subtask = 3"
        );
        assert!(m.claim().starts_with(
            "INSERT INTO \"floe_sink_commits\" (sink, run, subtask, checkpoint) VALUES ('it''s', 'run1', 3, 0) ON CONFLICT DO NOTHING; SELECT checkpoint"
        ));
    }
}
