use super::*;

fn round_trip<T: Data + PartialEq + std::fmt::Debug>(values: &[T]) {
    let mut buf = Vec::new();
    values.iter().for_each(|v| v.encode(&mut buf));
    let mut input = buf.as_slice();
    for v in values {
        assert_eq!(&T::decode(&mut input).expect("decodes"), v);
    }
    assert!(input.is_empty());
}

#[test]
fn codec_round_trips() {
    round_trip(&[0u64, 1, 127, 128, 300, u64::MAX]);
    round_trip(&[0u32, 77, u32::MAX]);
    round_trip(&[0i64, -1, 1, i64::MIN, i64::MAX, -300]);
    round_trip(&[0.0f64, -1.5, f64::MAX, f64::MIN_POSITIVE]);
    round_trip(&[true, false]);
    round_trip(&["".to_string(), "héllo".to_string(), "x".repeat(1000)]);
    round_trip(&[vec![1u64, 2, 3], vec![]]);
    round_trip(&[("a".to_string(), 5u64), ("bb".to_string(), u64::MAX)]);
    round_trip(&[(1i64, "z".to_string(), vec![true, false])]);
}

#[test]
fn decode_into_reuses_and_matches_decode() {
    let values = [
        ("héllo".to_string(), 5u64),
        (String::new(), 0),
        ("x".repeat(300), u64::MAX),
    ];
    let mut buf = Vec::new();
    values.iter().for_each(|v| v.encode(&mut buf));
    let mut input = buf.as_slice();
    let mut slot = (String::with_capacity(400), 9u64);
    for v in &values {
        slot.decode_into(&mut input).expect("decodes");
        assert_eq!(&slot, v);
    }
    assert!(input.is_empty());
    let mut bad = &[2u8, 0xff, 0xfe][..];
    assert!(
        String::new().decode_into(&mut bad).is_err(),
        "invalid UTF-8 is an error"
    );
}

#[test]
fn the_key_hash_is_stable_and_spreads_keys_over_key_groups() {
    // Fixed values: every process and build must route a key to the same key group, and a
    // checkpoint keeps state by key group, so a changed hash is a breaking change.
    let mut scratch = Vec::new();
    assert_eq!(key_hash(&"word".to_string(), &mut scratch), 741_783_893);
    assert_eq!(
        scratch,
        vec![4, b'w', b'o', b'r', b'd'],
        "the encoding is left for state backends"
    );
    assert_eq!(key_hash_only(&("a".to_string(), 1u64)), 315_815_429);
    assert_eq!(key_hash_only(&42u64), 3_418_034_013);
    assert_ne!(
        key_hash_only(&"ab".to_string()),
        key_hash_only(&"ab\0".to_string())
    );
    // Every byte counts, whatever the length (the tail is read in overlapping pieces).
    for len in 1..40 {
        let base = "k".repeat(len);
        for i in 0..len {
            let mut other = base.clone().into_bytes();
            other[i] = b'j';
            let other = String::from_utf8(other).expect("ascii");
            assert_ne!(key_hash_only(&base), key_hash_only(&other), "len {len} byte {i}");
        }
    }
    assert_ne!(
        key_hash_only(&("a".to_string(), "bc".to_string())),
        key_hash_only(&("ab".to_string(), "c".to_string()))
    );
    let mut per_group = [0u32; 128];
    for i in 0..12_800 {
        per_group[key_group_for_hash(key_hash_only(&format!("w{i}")), 128) as usize] += 1;
    }
    let (min, max) = (per_group.iter().min().unwrap(), per_group.iter().max().unwrap());
    assert!(
        *min > 50 && *max < 150,
        "100 keys per group expected, got {min}..{max}"
    );
}

#[test]
fn key_group_router_agrees_with_flinks_assignment() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for (max, p) in [
        (1u32, 1u32),
        (128, 2),
        (128, 3),
        (7, 7),
        (4096, 5),
        (32_768, 32_768),
        (100, 1),
    ] {
        let router = KeyGroupRouter::new(max, p);
        for h in [0u32, 1, 42, u32::MAX, i32::MAX as u32, 1 << 31]
            .into_iter()
            .chain((0..10_000).map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u32
            }))
        {
            let kg = key_group_for_hash(h, max);
            assert_eq!(router.key_group(h), kg, "hash {h} max {max}");
            assert_eq!(router.subtask(h), operator_index_for_key_group(max, p, kg));
        }
    }
}

#[test]
fn truncated_input_is_an_error_not_a_panic() {
    let mut buf = Vec::new();
    "hello".to_string().encode(&mut buf);
    let mut short = &buf[..3];
    assert!(String::decode(&mut short).is_err());
    let mut bad = &[0xffu8; 3][..];
    assert!(u64::decode(&mut bad).is_err());
}

#[test]
fn text_form_is_tab_separated() {
    let mut out = Vec::new();
    ("word".to_string(), 42u64).write_text(&mut out);
    assert_eq!(out, b"word\t42");
}

#[test]
fn text_fields_escape_what_would_split_a_field_or_a_line() {
    // Before, a field with a TAB or newline came out raw: one record read back as two fields or
    // two lines.
    let mut out = Vec::new();
    ("a\tb\nc\r\\d".to_string(), 'x', '\t', "plain é".to_string()).write_text(&mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "a\\tb\\nc\\r\\\\d\tx\t\\t\tplain é"
    );
    let mut out = Vec::new();
    vec!["x\ty".to_string()].write_text(&mut out);
    assert_eq!(out, b"[x\\ty]");
    // A record that is text is a line the job formatted itself: written as it is.
    let mut out = Vec::new();
    "k0\t17\t10".to_string().write_text(&mut out);
    assert_eq!(out, b"k0\t17\t10");
}

#[test]
fn murmur_matches_flink() {
    // Values of Flink's MathUtils.murmurHash(int), computed independently with Java int semantics.
    for (code, expected) in [
        (0u32, 593_689_054u32),
        (1, 68_075_478),
        (42, 1_134_849_565),
        (u32::MAX, 1_982_413_648),
        (123_456_789, 1_088_346_449),
    ] {
        assert_eq!(murmur_hash(code), expected, "murmurHash({code})");
    }
    assert_eq!(key_group_for_hash(42, 128), 29);
}

#[test]
fn key_groups_follow_flinks_ranges() {
    for (max, p) in [(128u32, 1u32), (128, 3), (128, 7), (4096, 5), (7, 7)] {
        for op in 0..p {
            for kg in key_group_range_for_operator(max, p, op) {
                assert_eq!(
                    operator_index_for_key_group(max, p, kg),
                    op,
                    "max {max} p {p} kg {kg}"
                );
            }
        }
        let covered: u32 = (0..p)
            .map(|op| key_group_range_for_operator(max, p, op).count() as u32)
            .sum();
        assert_eq!(covered, max);
    }
    let mut scratch = Vec::new();
    for w in ["a", "hello", "flink"] {
        let kg = key_group_for_hash(key_hash(&w.to_string(), &mut scratch), 128);
        assert!(kg < 128);
    }
}

mod derived {
    //! `#[derive(Data)]`: codec, text, hash and equality of every kind of field, and state schema
    //! evolution between versions of a type.

    use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

    use crate::Data;
    use crate::data::schema::{Compatibility, Schema, check, decode_stored};
    use crate::data::{key_hash_only, put_varint};

    fn bytes_of<T: Data>(v: &T) -> Vec<u8> {
        let mut out = Vec::new();
        v.encode(&mut out);
        out
    }

    fn text_of<T: Data>(v: &T) -> String {
        let mut out = Vec::new();
        v.write_text(&mut out);
        String::from_utf8(out).expect("utf-8")
    }

    fn round_trip<T: Data + PartialEq + std::fmt::Debug>(v: &T) {
        let bytes = bytes_of(v);
        let mut input = bytes.as_slice();
        assert_eq!(&T::decode(&mut input).expect("decodes"), v);
        assert!(input.is_empty(), "every byte read");
        assert!(v.data_eq(&v.clone()));
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct Primitives {
        a: u8,
        b: u16,
        c: u32,
        d: u64,
        e: u128,
        f: usize,
        g: i8,
        h: i16,
        i: i32,
        j: i64,
        k: i128,
        l: isize,
        m: f32,
        n: f64,
        o: bool,
        p: char,
        q: String,
        r: (),
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct Containers {
        opt: Option<String>,
        none: Option<u64>,
        list: Vec<Option<i32>>,
        map: HashMap<String, Vec<u64>>,
        sorted: BTreeMap<i64, String>,
        set: HashSet<u32>,
        sorted_set: BTreeSet<String>,
        array: [u16; 4],
        boxed: Box<Primitives>,
        twelve: (u8, u16, u32, u64, i8, i16, i32, i64, f32, f64, bool, String),
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    enum Shape {
        Empty,
        Circle(f64),
        Rect { w: u32, h: u32 },
        Named(String, Vec<Shape>),
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct Pair<A, B>(A, B);

    #[derive(Clone, Debug, PartialEq, Data)]
    struct Marker;

    fn primitives() -> Primitives {
        Primitives {
            a: 255,
            b: 65_535,
            c: u32::MAX,
            d: u64::MAX,
            e: u128::MAX - 7,
            f: 12_345,
            g: -128,
            h: i16::MIN,
            i: -70_000,
            j: i64::MIN,
            k: i128::MIN + 3,
            l: -5,
            m: 1.5,
            n: -0.25,
            o: true,
            p: 'λ',
            q: "tab\there".into(),
            r: (),
        }
    }

    fn containers() -> Containers {
        Containers {
            opt: Some("x".into()),
            none: None,
            list: vec![Some(-1), None, Some(i32::MAX)],
            map: (0..20)
                .map(|i| (format!("k{i}"), vec![i; i as usize % 3]))
                .collect(),
            sorted: [(-3, "a".to_string()), (9, "b".to_string())].into(),
            set: (0..50).collect(),
            sorted_set: ["z".to_string(), "a".to_string()].into(),
            array: [1, 2, 300, u16::MAX],
            boxed: Box::new(primitives()),
            twelve: (1, 2, 3, 4, -5, -6, -7, -8, 9.5, 10.25, false, "twelve".into()),
        }
    }

    #[test]
    fn every_kind_of_field_round_trips() {
        round_trip(&primitives());
        round_trip(&containers());
        round_trip(&Shape::Empty);
        round_trip(&Shape::Circle(2.5));
        round_trip(&Shape::Rect { w: 3, h: 4 });
        round_trip(&Shape::Named("n".into(), vec![Shape::Empty, Shape::Circle(1.0)]));
        round_trip(&Pair("a".to_string(), Some(7u64)));
        round_trip(&Marker);
        // decode_into reuses the value and gives what decode gives.
        let mut slot = containers();
        slot.opt = None;
        let other = Containers {
            opt: Some("y".into()),
            ..containers()
        };
        slot.decode_into(&mut bytes_of(&other).as_slice())
            .expect("decodes");
        assert_eq!(slot, other);
    }

    #[test]
    fn a_derived_struct_is_encoded_as_its_fields_back_to_back() {
        // The layout a hand-written codec has: each field's encoding in order, nothing between.
        let p = Pair("word".to_string(), 300u64);
        let mut expected = vec![4, b'w', b'o', b'r', b'd'];
        put_varint(&mut expected, 300);
        assert_eq!(bytes_of(&p), expected);
        // So its key hash and text are those of the tuple of its fields.
        assert_eq!(key_hash_only(&p), key_hash_only(&("word".to_string(), 300u64)));
        assert_eq!(text_of(&p), "word\t300");
        // An enum: its variant's index, then the fields.
        assert_eq!(bytes_of(&Shape::Rect { w: 3, h: 200 }), vec![2, 3, 200, 1]);
        assert_eq!(text_of(&Shape::Rect { w: 3, h: 4 }), "Rect\t3\t4");
        assert_eq!(text_of(&Shape::Empty), "Empty");
        assert_eq!(text_of(&Pair(None::<u8>, vec![1u8, 2])), "null\t[1, 2]");
        // A derived record's text fields are escaped, as a tuple's are.
        assert_eq!(
            text_of(&Pair("a\tb".to_string(), Some("c\nd".to_string()))),
            "a\\tb\tc\\nd"
        );
    }

    #[test]
    fn equal_hash_maps_have_one_encoding_and_one_hash_whatever_their_insertion_order() {
        let a: HashMap<String, u64> = (0..100).map(|i| (format!("k{i}"), i)).collect();
        let b: HashMap<String, u64> = (0..100).rev().map(|i| (format!("k{i}"), i)).collect();
        assert_eq!(bytes_of(&a), bytes_of(&b));
        assert_eq!(key_hash_only(&a), key_hash_only(&b));
        assert!(a.data_eq(&b));
        let mut c = b.clone();
        c.insert("k5".into(), 6);
        assert!(!a.data_eq(&c));
        assert_ne!(key_hash_only(&a), key_hash_only(&c));
    }

    #[test]
    fn corrupt_input_is_an_error_naming_what_failed() {
        let err = Shape::decode(&mut [9u8].as_slice()).expect_err("no variant 9");
        assert!(
            err.to_string().contains("Shape: variant 9, the type has 4"),
            "{err}"
        );
        let bytes = bytes_of(&primitives());
        assert!(Primitives::decode(&mut &bytes[..bytes.len() - 1]).is_err());
        assert!(
            char::decode(&mut bytes_of(&0xD800u32).as_slice()).is_err(),
            "a surrogate is no char"
        );
        assert!(i8::decode(&mut [].as_slice()).is_err());
    }

    // Versions of one state type, as a job's code changes between a savepoint and a restore.

    #[derive(Clone, Debug, PartialEq, Data)]
    struct SessionV1 {
        user: String,
        visits: u64,
        pages: Vec<String>,
        last: Option<Visit1>,
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct Visit1 {
        page: String,
        millis: u64,
    }

    /// `pages` removed, `visits` moved, `referrer` and `score` added with defaults, and the
    /// nested `Visit` gained a field.
    #[derive(Clone, Debug, PartialEq, Data)]
    struct SessionV2 {
        visits: u64,
        user: String,
        last: Option<Visit2>,
        #[data(default)]
        referrer: Option<String>,
        #[data(default = "seven")]
        score: u32,
    }

    fn seven() -> u32 {
        7
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct Visit2 {
        page: String,
        millis: u64,
        #[data(default)]
        device: String,
    }

    /// A field added without a default.
    #[derive(Clone, Debug, PartialEq, Data)]
    struct SessionNoDefault {
        user: String,
        visits: u64,
        pages: Vec<String>,
        last: Option<Visit1>,
        country: String,
    }

    /// A field whose type changed.
    #[derive(Clone, Debug, PartialEq, Data)]
    struct SessionRetyped {
        user: String,
        visits: String,
        pages: Vec<String>,
        last: Option<Visit1>,
    }

    fn through_json(s: &Schema) -> Schema {
        // What a checkpoint records and a restore reads back (no defaults, no decoders).
        serde_json::from_str(&serde_json::to_string(s).expect("serializes")).expect("parses")
    }

    fn restore<T: Data>(bytes: &[u8], stored: &Schema) -> T {
        let compatibility = check(stored, &T::schema()).unwrap_or_else(|e| panic!("{e}"));
        decode_stored::<T>(bytes, stored, compatibility).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn state_written_by_an_older_type_restores_into_one_that_added_and_removed_fields() {
        let stored = through_json(&SessionV1::schema());
        assert_eq!(check(&stored, &SessionV1::schema()), Ok(Compatibility::Identical));
        assert_eq!(
            check(&stored, &SessionV2::schema()),
            Ok(Compatibility::AfterMigration)
        );
        for old in [
            SessionV1 {
                user: "ada".into(),
                visits: 3,
                pages: vec!["/a".into(), "/b".into()],
                last: Some(Visit1 {
                    page: "/b".into(),
                    millis: 250,
                }),
            },
            SessionV1 {
                user: String::new(),
                visits: 0,
                pages: Vec::new(),
                last: None,
            },
        ] {
            let got: SessionV2 = restore(&bytes_of(&old), &stored);
            assert_eq!(
                got,
                SessionV2 {
                    visits: old.visits,
                    user: old.user.clone(),
                    last: old.last.map(|v| Visit2 {
                        page: v.page,
                        millis: v.millis,
                        device: String::new(),
                    }),
                    referrer: None,
                    score: 7,
                }
            );
        }
    }

    #[test]
    fn an_incompatible_change_is_refused_naming_the_type_and_field() {
        let stored = through_json(&SessionV1::schema());
        let e = check(&stored, &SessionNoDefault::schema()).expect_err("no default");
        assert_eq!(e.path, "SessionNoDefault.country");
        assert!(e.to_string().contains("added without #[data(default)]"), "{e}");
        let e = check(&stored, &SessionRetyped::schema()).expect_err("retyped");
        assert_eq!(
            e.to_string(),
            "SessionRetyped.visits: was u64, is now string (a field's type may not change)"
        );
        // Inside a collection too.
        let e = check(
            &through_json(&Vec::<Visit2>::schema()),
            &Vec::<SessionNoDefault>::schema(),
        )
        .expect_err("nested");
        assert_eq!(e.path, "SessionNoDefault.user");
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    enum EventV1 {
        Click { page: String },
        Close,
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    enum EventV2 {
        Open(u64),
        Close,
        Click {
            page: String,
            #[data(default)]
            x: i32,
        },
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    enum EventV3 {
        Click { page: String },
    }

    #[test]
    fn enums_may_add_and_reorder_variants_but_not_remove_them() {
        let stored = through_json(&Vec::<EventV1>::schema());
        let old = vec![EventV1::Close, EventV1::Click { page: "/".into() }];
        let got: Vec<EventV2> = restore(&bytes_of(&old), &stored);
        assert_eq!(
            got,
            vec![
                EventV2::Close,
                EventV2::Click {
                    page: "/".into(),
                    x: 0
                }
            ]
        );
        let e = check(&stored, &Vec::<EventV3>::schema()).expect_err("removed variant");
        assert_eq!(e.path, "EventV3::Close");
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct TreeV1 {
        value: u64,
        children: Vec<TreeV1>,
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct TreeV2 {
        value: u64,
        children: Vec<TreeV2>,
        #[data(default)]
        weight: u32,
    }

    #[test]
    fn a_recursive_type_has_a_finite_schema_and_evolves() {
        let leaf = |v| TreeV1 {
            value: v,
            children: Vec::new(),
        };
        let old = TreeV1 {
            value: 1,
            children: vec![
                leaf(2),
                TreeV1 {
                    value: 3,
                    children: vec![leaf(4)],
                },
            ],
        };
        round_trip(&old);
        let stored = through_json(&TreeV1::schema());
        let got: TreeV2 = restore(&bytes_of(&old), &stored);
        fn values(t: &TreeV2, out: &mut Vec<(u64, u32)>) {
            out.push((t.value, t.weight));
            t.children.iter().for_each(|c| values(c, out));
        }
        let mut seen = Vec::new();
        values(&got, &mut seen);
        assert_eq!(seen, vec![(1, 0), (2, 0), (3, 0), (4, 0)]);
    }

    /// A type with a hand-written codec (no schema of its own).
    #[derive(Clone, Debug, PartialEq)]
    struct Opaque(u64);

    impl Data for Opaque {
        fn encode(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0.to_be_bytes());
        }
        fn decode(input: &mut &[u8]) -> crate::Result<Self> {
            let (head, rest) = input
                .split_at_checked(8)
                .ok_or(crate::Error::Decode("opaque".into()))?;
            *input = rest;
            Ok(Opaque(u64::from_be_bytes(head.try_into().expect("8 bytes"))))
        }
        fn write_text(&self, _: &mut Vec<u8>) {}
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct WithOpaqueV1 {
        id: Opaque,
        name: String,
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct WithOpaqueV2 {
        #[data(default)]
        added: u8,
        name: String,
        id: Opaque,
    }

    #[derive(Clone, Debug, PartialEq, Data)]
    struct WithOpaqueV3 {
        name: String,
    }

    #[test]
    fn a_hand_written_field_moves_with_its_struct_but_cannot_be_removed() {
        let stored = through_json(&WithOpaqueV1::schema());
        let old = WithOpaqueV1 {
            id: Opaque(u64::MAX - 1),
            name: "n".into(),
        };
        let got: WithOpaqueV2 = restore(&bytes_of(&old), &stored);
        assert_eq!(
            got,
            WithOpaqueV2 {
                added: 0,
                name: "n".into(),
                id: Opaque(u64::MAX - 1)
            }
        );
        let e = check(&stored, &WithOpaqueV3::schema()).expect_err("removed opaque field");
        assert_eq!(e.path, "WithOpaqueV3.id");
    }
}
