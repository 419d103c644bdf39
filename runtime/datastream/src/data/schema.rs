//! The shape of a [`Data`] type's encoding, and state schema evolution: state written by one
//! version of a type is rewritten into the encoding of another, field by field, as Flink's POJO
//! serializer migrates state whose class added or removed fields.
//!
//! A type's [`Schema`] is recorded with the state it writes. At a restore, [`check`] compares the
//! recorded schema with the type's current one: equal schemas read the bytes as they are; a struct
//! (or enum variant) that removed fields, or added fields that say what they default to
//! (`#[data(default)]`), is [`migrate`]d value by value; any other change (a field's type, a
//! removed enum variant, an added field without a default) is refused before a byte is read,
//! naming the type and the field.
//!
//! Fields are matched by name, so fields may also be reordered; a tuple struct's fields are named
//! by position, so one may add fields at the end. A type whose codec is written by hand and that
//! gives no schema is [`Schema::Opaque`]: it restores into the same type name only.

use std::any::TypeId;
use std::cell::RefCell;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::Data;
use super::impls::{get_varint, put_varint, take};
use crate::error::{Error, Result};

/// The shape of an encoding (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schema {
    Unit,
    Bool,
    U8,
    U16,
    U32,
    U64,
    U128,
    I8,
    I16,
    I32,
    I64,
    I128,
    F32,
    F64,
    Char,
    String,
    Option(Box<Schema>),
    /// A length, then the items (`Vec`, sets).
    Seq(Box<Schema>),
    /// A length, then key and value pairs.
    Map(Box<Schema>, Box<Schema>),
    /// A fixed number of items.
    Array(usize, Box<Schema>),
    Tuple(Vec<Schema>),
    Struct {
        name: String,
        fields: Vec<Field>,
    },
    /// A varint variant index, then the variant's fields.
    Enum {
        name: String,
        variants: Vec<Variant>,
    },
    /// A recursive type inside its own definition: the enclosing struct or enum of this name.
    Ref(String),
    /// A hand-written codec: restores into the same type name, whose codec finds its extent.
    Opaque {
        name: String,
        #[serde(skip)]
        skip: Skipper,
    },
}

/// A struct's or variant's field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Field {
    pub name: String,
    pub schema: Schema,
    /// The encoding of the value a restore gives this field when the stored data lacks it
    /// (`#[data(default)]`); only the current type's schema has it.
    #[serde(skip)]
    pub default: FieldDefault,
}

impl Field {
    pub fn new(name: &str, schema: Schema, default: Option<Vec<u8>>) -> Self {
        Field {
            name: name.to_string(),
            schema,
            default: FieldDefault(default),
        }
    }
}

/// An enum's variant: its name and fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    pub name: String,
    pub fields: Vec<Field>,
}

impl Variant {
    pub fn new(name: &str, fields: Vec<Field>) -> Self {
        Variant {
            name: name.to_string(),
            fields,
        }
    }
}

/// A field's default encoding. Not part of the shape: two schemas that differ only here are
/// equal.
#[derive(Debug, Clone, Default)]
pub struct FieldDefault(pub Option<Vec<u8>>);

impl PartialEq for FieldDefault {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// How an opaque type's encoding is stepped over (its decoder); absent in a schema read back
/// from a checkpoint. Not part of the shape.
#[derive(Clone, Copy, Default)]
pub struct Skipper(Option<StepOver>);

/// Steps over one encoded value at the front of the input.
type StepOver = fn(&mut &[u8]) -> Result<()>;

impl PartialEq for Skipper {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for Skipper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Skipper"
        } else {
            "Skipper(none)"
        })
    }
}

thread_local! {
    /// The types whose schema is being built on this thread (a recursive type meets itself).
    static BUILDING: RefCell<Vec<TypeId>> = const { RefCell::new(Vec::new()) };
}

impl Schema {
    /// The schema of a type with a hand-written codec (the default of [`Data::schema`]).
    pub fn opaque<T: Data>() -> Schema {
        Schema::Opaque {
            name: std::any::type_name::<T>().to_string(),
            skip: Skipper(Some(|input| T::decode(input).map(drop))),
        }
    }

    /// Builds the schema of `T` (a struct or enum named `name`), or [`Schema::Ref`] when `T`'s
    /// schema is already being built further up (a field of `T` holds a `T`).
    pub fn recursive<T: 'static>(name: &str, build: impl FnOnce() -> Schema) -> Schema {
        let id = TypeId::of::<T>();
        if BUILDING.with(|b| b.borrow().contains(&id)) {
            return Schema::Ref(name.to_string());
        }
        BUILDING.with(|b| b.borrow_mut().push(id));
        let schema = build();
        BUILDING.with(|b| b.borrow_mut().retain(|t| *t != id));
        schema
    }

    /// The type's name in messages.
    fn describe(&self) -> String {
        match self {
            Schema::Option(s) => format!("Option<{}>", s.describe()),
            Schema::Seq(s) => format!("a sequence of {}", s.describe()),
            Schema::Map(k, v) => format!("a map of {} to {}", k.describe(), v.describe()),
            Schema::Array(n, s) => format!("[{}; {n}]", s.describe()),
            Schema::Tuple(items) => {
                let items: Vec<String> = items.iter().map(Schema::describe).collect();
                format!("({})", items.join(", "))
            }
            Schema::Struct { name, .. } | Schema::Enum { name, .. } | Schema::Ref(name) => name.clone(),
            Schema::Opaque { name, .. } => name.clone(),
            other => format!("{other:?}").to_lowercase(),
        }
    }
}

/// Why state written with one schema cannot be read as another: the type and field, and what
/// changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatible {
    /// The type that changed, and the path to the field in it (`Session.visits`).
    pub path: String,
    pub reason: String,
}

impl fmt::Display for Incompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// What a restore does with state written with `stored` and read as `current`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compatibility {
    /// The same shape: the bytes are read as they are.
    Identical,
    /// Each value is rewritten with [`migrate`] first.
    AfterMigration,
}

/// The definitions of the structs and enums a walk is inside (what a [`Schema::Ref`] names).
#[derive(Default)]
struct Scope<'a>(Vec<&'a Schema>);

impl<'a> Scope<'a> {
    fn enter(&mut self, s: &'a Schema) -> usize {
        let depth = self.0.len();
        if matches!(s, Schema::Struct { .. } | Schema::Enum { .. }) {
            self.0.push(s);
        }
        depth
    }

    fn leave(&mut self, depth: usize) {
        self.0.truncate(depth);
    }

    fn resolve(&self, s: &'a Schema) -> &'a Schema {
        match s {
            Schema::Ref(name) => self
                .0
                .iter()
                .rev()
                .find(|d| matches!(d, Schema::Struct { name: n, .. } | Schema::Enum { name: n, .. } if n == name))
                .copied()
                .unwrap_or(s),
            _ => s,
        }
    }
}

/// Whether (and how) state written with `stored` reads as `current`; refused changes name the
/// type and field.
pub fn check(stored: &Schema, current: &Schema) -> Result<Compatibility, Incompatible> {
    if stored == current {
        return Ok(Compatibility::Identical);
    }
    let mut seen = Vec::new();
    check_in(
        stored,
        current,
        &mut Scope::default(),
        &mut Scope::default(),
        &current.describe(),
        &mut seen,
    )?;
    Ok(Compatibility::AfterMigration)
}

fn check_in<'a>(
    old: &'a Schema,
    new: &'a Schema,
    old_scope: &mut Scope<'a>,
    new_scope: &mut Scope<'a>,
    path: &str,
    seen: &mut Vec<(String, String)>,
) -> Result<(), Incompatible> {
    let (old, new) = (old_scope.resolve(old), new_scope.resolve(new));
    let refuse = |reason: String| Incompatible {
        path: path.to_string(),
        reason,
    };
    let (od, nd) = (old_scope.enter(old), new_scope.enter(new));
    let result = match (old, new) {
        (Schema::Option(a), Schema::Option(b)) | (Schema::Seq(a), Schema::Seq(b)) => {
            check_in(a, b, old_scope, new_scope, path, seen)
        }
        (Schema::Map(ak, av), Schema::Map(bk, bv)) => {
            check_in(ak, bk, old_scope, new_scope, &format!("{path} (key)"), seen)
                .and_then(|()| check_in(av, bv, old_scope, new_scope, path, seen))
        }
        (Schema::Array(n, a), Schema::Array(m, b)) if n == m => {
            check_in(a, b, old_scope, new_scope, path, seen)
        }
        (Schema::Tuple(a), Schema::Tuple(b)) if a.len() == b.len() => {
            a.iter().zip(b).enumerate().try_for_each(|(i, (x, y))| {
                check_in(x, y, old_scope, new_scope, &format!("{path}.{i}"), seen)
            })
        }
        (
            Schema::Struct {
                name: old_name,
                fields: a,
            },
            Schema::Struct { name, fields: b },
        ) => {
            let pair = (old_name.clone(), name.clone());
            if seen.contains(&pair) {
                Ok(())
            } else {
                seen.push(pair);
                check_fields(name, a, b, old_scope, new_scope, seen)
            }
        }
        (
            Schema::Enum {
                name: old_name,
                variants: a,
            },
            Schema::Enum { name, variants: b },
        ) => {
            let pair = (old_name.clone(), format!("enum {name}"));
            if seen.contains(&pair) {
                Ok(())
            } else {
                seen.push(pair);
                a.iter()
                    .try_for_each(|v| match b.iter().find(|w| w.name == v.name) {
                        Some(w) => check_fields(
                            &format!("{name}::{}", v.name),
                            &v.fields,
                            &w.fields,
                            old_scope,
                            new_scope,
                            seen,
                        ),
                        None => Err(Incompatible {
                            path: format!("{name}::{}", v.name),
                            reason: "the variant was removed (stored values may hold it)".into(),
                        }),
                    })
            }
        }
        (Schema::Opaque { name: a, .. }, Schema::Opaque { name: b, .. }) if a == b => Ok(()),
        (a, b) if a == b => Ok(()),
        (a, b) => Err(refuse(format!(
            "was {}, is now {} (a field's type may not change)",
            a.describe(),
            b.describe()
        ))),
    };
    old_scope.leave(od);
    new_scope.leave(nd);
    result
}

fn check_fields<'a>(
    owner: &str,
    old: &'a [Field],
    new: &'a [Field],
    old_scope: &mut Scope<'a>,
    new_scope: &mut Scope<'a>,
    seen: &mut Vec<(String, String)>,
) -> Result<(), Incompatible> {
    for f in new {
        let path = format!("{owner}.{}", f.name);
        match old.iter().find(|o| o.name == f.name) {
            Some(o) => check_in(&o.schema, &f.schema, old_scope, new_scope, &path, seen)?,
            None if f.default.0.is_none() => {
                return Err(Incompatible {
                    path,
                    reason: "the field was added without #[data(default)], and stored values lack it".into(),
                });
            }
            None => {}
        }
    }
    for o in old.iter().filter(|o| !new.iter().any(|f| f.name == o.name)) {
        if contains_opaque(&o.schema) {
            return Err(Incompatible {
                path: format!("{owner}.{}", o.name),
                reason: format!(
                    "the field was removed, and its type {} has a hand-written codec whose stored values cannot be stepped over",
                    o.schema.describe()
                ),
            });
        }
    }
    Ok(())
}

fn contains_opaque(s: &Schema) -> bool {
    match s {
        Schema::Opaque { .. } => true,
        Schema::Option(a) | Schema::Seq(a) | Schema::Array(_, a) => contains_opaque(a),
        Schema::Map(k, v) => contains_opaque(k) || contains_opaque(v),
        Schema::Tuple(items) => items.iter().any(contains_opaque),
        Schema::Struct { fields, .. } => fields.iter().any(|f| contains_opaque(&f.schema)),
        Schema::Enum { variants, .. } => variants
            .iter()
            .flat_map(|v| &v.fields)
            .any(|f| contains_opaque(&f.schema)),
        _ => false,
    }
}

/// Rewrites one value at the front of `input`, written with `stored`, into the encoding of
/// `current` (appended to `out`). Call [`check`] first: this assumes the schemas are compatible.
pub fn migrate(input: &mut &[u8], stored: &Schema, current: &Schema, out: &mut Vec<u8>) -> Result<()> {
    migrate_in(
        input,
        stored,
        current,
        &mut Scope::default(),
        &mut Scope::default(),
        out,
    )
}

fn migrate_in<'a>(
    input: &mut &[u8],
    old: &'a Schema,
    new: &'a Schema,
    old_scope: &mut Scope<'a>,
    new_scope: &mut Scope<'a>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let (old, new) = (old_scope.resolve(old), new_scope.resolve(new));
    let (od, nd) = (old_scope.enter(old), new_scope.enter(new));
    let result = (|| match (old, new) {
        (Schema::Option(a), Schema::Option(b)) => {
            let tag = take(input, 1)?[0];
            out.push(tag);
            if tag == 1 {
                migrate_in(input, a, b, old_scope, new_scope, out)?;
            }
            Ok(())
        }
        (Schema::Seq(a), Schema::Seq(b)) => {
            let n = get_varint(input)?;
            put_varint(out, n);
            (0..n).try_for_each(|_| migrate_in(input, a, b, old_scope, new_scope, out))
        }
        (Schema::Map(ak, av), Schema::Map(bk, bv)) => {
            let n = get_varint(input)?;
            put_varint(out, n);
            (0..n).try_for_each(|_| {
                migrate_in(input, ak, bk, old_scope, new_scope, out)?;
                migrate_in(input, av, bv, old_scope, new_scope, out)
            })
        }
        (Schema::Array(n, a), Schema::Array(_, b)) => {
            (0..*n).try_for_each(|_| migrate_in(input, a, b, old_scope, new_scope, out))
        }
        (Schema::Tuple(a), Schema::Tuple(b)) => a
            .iter()
            .zip(b)
            .try_for_each(|(x, y)| migrate_in(input, x, y, old_scope, new_scope, out)),
        (Schema::Struct { fields: a, .. }, Schema::Struct { fields: b, .. }) => {
            migrate_fields(input, a, b, old_scope, new_scope, out)
        }
        (Schema::Enum { name, variants: a }, Schema::Enum { variants: b, .. }) => {
            let index = get_varint(input)?;
            let v = usize::try_from(index)
                .ok()
                .and_then(|i| a.get(i))
                .ok_or_else(|| super::unknown_variant(name, index, a.len()))?;
            let (new_index, w) = b
                .iter()
                .enumerate()
                .find(|(_, w)| w.name == v.name)
                .ok_or_else(|| Error::Decode(format!("{name}::{}: the variant was removed", v.name)))?;
            put_varint(out, new_index as u64);
            migrate_fields(input, &v.fields, &w.fields, old_scope, new_scope, out)
        }
        (Schema::Opaque { .. }, Schema::Opaque { skip, name }) => {
            let start = *input;
            let skip = skip
                .0
                .ok_or_else(|| Error::Decode(format!("{name}: no decoder to step over it")))?;
            skip(input)?;
            out.extend_from_slice(&start[..start.len() - input.len()]);
            Ok(())
        }
        // The same shape ([`check`] passed): stepped over with the current schema, whose
        // hand-written codecs can step over their values.
        (_, b) => {
            let start = *input;
            skip_value(input, b, new_scope)?;
            out.extend_from_slice(&start[..start.len() - input.len()]);
            Ok(())
        }
    })();
    old_scope.leave(od);
    new_scope.leave(nd);
    result
}

/// A struct's or variant's fields: each stored field rewritten into its slot of the current
/// order, removed ones stepped over, added ones their default.
fn migrate_fields<'a>(
    input: &mut &[u8],
    old: &'a [Field],
    new: &'a [Field],
    old_scope: &mut Scope<'a>,
    new_scope: &mut Scope<'a>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let mut slots: Vec<Option<Vec<u8>>> = vec![None; new.len()];
    for o in old {
        match new.iter().position(|f| f.name == o.name) {
            Some(i) => {
                let mut bytes = Vec::new();
                migrate_in(input, &o.schema, &new[i].schema, old_scope, new_scope, &mut bytes)?;
                slots[i] = Some(bytes);
            }
            None => skip_value(input, &o.schema, old_scope)?,
        }
    }
    for (f, slot) in new.iter().zip(slots) {
        let bytes = slot.or_else(|| f.default.0.clone()).ok_or_else(|| {
            Error::Decode(format!(
                "field {}: stored values lack it and it has no default",
                f.name
            ))
        })?;
        out.extend_from_slice(&bytes);
    }
    Ok(())
}

/// Steps over one value written with `s`.
fn skip_value<'a>(input: &mut &[u8], s: &'a Schema, scope: &mut Scope<'a>) -> Result<()> {
    let s = scope.resolve(s);
    let depth = scope.enter(s);
    let result = (|| match s {
        Schema::Unit => Ok(()),
        Schema::Bool | Schema::U8 | Schema::I8 => take(input, 1).map(drop),
        Schema::U16 | Schema::U32 | Schema::U64 | Schema::I16 | Schema::I32 | Schema::I64 | Schema::Char => {
            get_varint(input).map(drop)
        }
        Schema::F32 => take(input, 4).map(drop),
        Schema::F64 => take(input, 8).map(drop),
        Schema::U128 | Schema::I128 => take(input, 16).map(drop),
        Schema::String => {
            let n = get_varint(input)?;
            take(
                input,
                usize::try_from(n).map_err(|_| Error::Decode("length".into()))?,
            )
            .map(drop)
        }
        Schema::Option(a) => match take(input, 1)?[0] {
            0 => Ok(()),
            _ => skip_value(input, a, scope),
        },
        Schema::Seq(a) => (0..get_varint(input)?).try_for_each(|_| skip_value(input, a, scope)),
        Schema::Map(k, v) => (0..get_varint(input)?).try_for_each(|_| {
            skip_value(input, k, scope)?;
            skip_value(input, v, scope)
        }),
        Schema::Array(n, a) => (0..*n).try_for_each(|_| skip_value(input, a, scope)),
        Schema::Tuple(items) => items.iter().try_for_each(|x| skip_value(input, x, scope)),
        Schema::Struct { fields, .. } => fields
            .iter()
            .try_for_each(|f| skip_value(input, &f.schema, scope)),
        Schema::Enum { name, variants } => {
            let index = get_varint(input)?;
            let v = usize::try_from(index)
                .ok()
                .and_then(|i| variants.get(i))
                .ok_or_else(|| super::unknown_variant(name, index, variants.len()))?;
            v.fields
                .iter()
                .try_for_each(|f| skip_value(input, &f.schema, scope))
        }
        Schema::Ref(name) => Err(Error::Decode(format!(
            "{name}: a recursive reference outside its type"
        ))),
        Schema::Opaque { name, skip } => match skip.0 {
            Some(skip) => skip(input),
            None => Err(Error::Decode(format!("{name}: no decoder to step over it"))),
        },
    })();
    scope.leave(depth);
    result
}

/// Reads `bytes` (one value written with `stored`) as a `T`, migrating it when the schemas
/// differ: a restore's decode.
pub fn decode_stored<T: Data>(bytes: &[u8], stored: &Schema, compatibility: Compatibility) -> Result<T> {
    let mut input = bytes;
    match compatibility {
        Compatibility::Identical => T::decode(&mut input),
        Compatibility::AfterMigration => {
            let mut out = Vec::with_capacity(bytes.len());
            migrate(&mut input, stored, &T::schema(), &mut out)?;
            T::decode(&mut out.as_slice())
        }
    }
}
