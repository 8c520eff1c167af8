//! The configuration keys a `Deserialize` type accepts, read from its serde
//! derive rather than maintained by hand: what keeps a plugin's reference
//! page (`docs/plugins/<name>.md`) in step with its config struct.
//!
//! [`accepted_keys`] drives `T::deserialize` with a recording deserializer.
//! serde's derive passes a struct's field names (after `rename` and
//! `rename_all`, aliases included) to `deserialize_struct`; the recorder notes them, then
//! feeds the struct one field at a time with a recorder as its value, so
//! the fields of nested structs (through `Option`, `Vec` and `Box`) are
//! found too, as dotted paths (`ipam.dataDir`, `vlanTrunk.minID`).
//!
//! Limits: a struct with a `#[serde(flatten)]` field is deserialized
//! through `deserialize_map` and tells no field names (its keys, and the
//! flattened struct's, are not found: probe the flattened type on its own
//! with [`accepted_keys_at`]); aliases are reported like names (serde
//! lists them among the fields, and they are accepted keys); a type with a hand-written `Deserialize` reports what it passes
//! to `deserialize_struct`, if anything; maps keyed by user data
//! (`HashMap<String, T>`) are not descended into.
//!
//! ```
//! #[derive(serde::Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! #[allow(dead_code)]
//! struct Conf {
//!     is_gateway: bool,
//!     ipam: Option<Ipam>,
//! }
//! #[derive(serde::Deserialize)]
//! #[allow(dead_code)]
//! struct Ipam {
//!     #[serde(rename = "dataDir")]
//!     data_dir: String,
//! }
//! assert_eq!(
//!     cni_types::keys::accepted_keys::<Conf>(),
//!     ["ipam", "ipam.dataDir", "isGateway"]
//! );
//! ```

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

/// Nesting deeper than this is not explored (a guard against recursive
/// types).
const MAX_DEPTH: usize = 6;

/// Every key `T` accepts, as sorted dotted paths (see the module docs).
pub fn accepted_keys<T: DeserializeOwned>() -> Vec<String> {
    accepted_keys_at::<T>("")
}

/// [`accepted_keys`] with every path under `prefix` (`"ipam"` gives
/// `ipam.subnet`...); an empty prefix adds nothing.
pub fn accepted_keys_at<T: DeserializeOwned>(prefix: &str) -> Vec<String> {
    accepted_key_shapes_at::<T>(prefix)
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

/// [`accepted_keys_at`] with each key's [`KeyKind`]s: what a test feeding
/// every key a value of the wrong kind builds its values from.
pub fn accepted_key_shapes_at<T: DeserializeOwned>(prefix: &str) -> Vec<KeyShape> {
    let mut found = BTreeSet::new();
    let mut shapes = std::collections::HashMap::new();
    let mut queue: Vec<Vec<&'static str>> = vec![Vec::new()];
    while let Some(focus) = queue.pop() {
        let recorded = RefCell::new(None);
        let shape = RefCell::new(Shape::default());
        // The struct at the end of `focus` records its fields; a failure
        // (a required field missing, a value of the wrong shape) comes
        // after the recording and is of no interest.
        let _ = T::deserialize(Recorder {
            focus: &focus,
            recorded: &recorded,
            shape: &shape,
        });
        if !focus.is_empty() {
            shapes.insert(focus.join("."), shape.into_inner().kinds);
        }
        let Some(fields) = recorded.into_inner() else {
            continue;
        };
        for field in fields {
            let mut path = focus.clone();
            path.push(field);
            found.insert(path.join("."));
            if path.len() < MAX_DEPTH {
                queue.push(path);
            }
        }
    }
    found
        .into_iter()
        .map(|k| {
            let kinds = shapes.remove(&k).unwrap_or_default();
            let k = if prefix.is_empty() {
                k
            } else {
                format!("{prefix}.{k}")
            };
            (k, kinds)
        })
        .collect()
}

#[derive(Debug)]
struct Stop(String);

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Stop(msg.to_string())
    }
}

/// A deserializer that walks down `focus` (one field name per struct level)
/// and records the field names of the struct it reaches at the end.
#[derive(Clone, Copy)]
struct Recorder<'a> {
    focus: &'a [&'static str],
    recorded: &'a RefCell<Option<Vec<&'static str>>>,
    shape: &'a RefCell<Shape>,
}

/// The JSON shape recorded at the end of the focus: the kinds from the
/// outside in (`[Array, Array, Object]` for a `Vec<Vec<Struct>>`), complete
/// once a kind that is not an array is noted.
#[derive(Default)]
struct Shape {
    kinds: Vec<KeyKind>,
    done: bool,
}

/// The JSON kind a configuration key takes, as its type's `Deserialize`
/// asks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyKind {
    /// `true` or `false`.
    Bool,
    /// An integer.
    Integer,
    /// Any number.
    Float,
    /// A string (addresses, CIDRs and durations included).
    String,
    /// An array (its elements' kind follows in the shape).
    Array,
    /// An object (a struct, or a map keyed by user data).
    Object,
    /// One of a fixed set of values (a Rust enum).
    Enum,
    /// Anything (a `serde_json::Value`, or a type that looks at the JSON
    /// before it decides).
    Any,
}

/// A key with the kinds of JSON it takes, from the outside in: `["ranges",
/// [Array, Array, Object]]` for host-local's `ranges`.
pub type KeyShape = (String, Vec<KeyKind>);

/// A map of zero or one entry: the next focused field, whose value is a
/// recorder one level further down.
struct Fields<'a> {
    key: Option<&'static str>,
    value: Recorder<'a>,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        match self.key.take() {
            Some(k) => seed.deserialize(k.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Stop> {
        seed.deserialize(self.value)
    }
}

/// A sequence of one element (a recorder at the same focus): the element
/// type of a `Vec<Struct>` is explored like a plain field.
struct One<'a>(Option<Recorder<'a>>);

impl<'de> SeqAccess<'de> for One<'_> {
    type Error = Stop;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Stop> {
        match self.0.take() {
            Some(r) => seed.deserialize(r).map(Some),
            None => Ok(None),
        }
    }
}

impl<'a> Recorder<'a> {
    /// Notes `kind` when the focus has been reached and the shape is not
    /// complete; `last`: nothing inside follows (not an array).
    fn note(&self, kind: KeyKind, last: bool) {
        if !self.focus.is_empty() {
            return;
        }
        let mut shape = self.shape.borrow_mut();
        if !shape.done {
            shape.kinds.push(kind);
            shape.done = last;
        }
    }

    fn one_field_map(self, fields: &[&'static str]) -> Fields<'a> {
        match self.focus.split_first() {
            Some((first, rest)) if fields.contains(first) => Fields {
                key: Some(first),
                value: Recorder {
                    focus: rest,
                    recorded: self.recorded,
                    shape: self.shape,
                },
            },
            _ => Fields {
                key: None,
                value: self,
            },
        }
    }
}

macro_rules! zero {
    ($($method:ident => $kind:ident, $visit:ident($($value:expr)?)),* $(,)?) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
            self.note(KeyKind::$kind, true);
            visitor.$visit($($value)?)
        })*
    };
}

impl<'de> de::Deserializer<'de> for Recorder<'_> {
    type Error = Stop;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        if self.focus.is_empty() {
            self.note(KeyKind::Object, true);
            *self.recorded.borrow_mut() = Some(fields.to_vec());
            return visitor.visit_map(Fields {
                key: None,
                value: self,
            });
        }
        visitor.visit_map(self.one_field_map(fields))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        self.note(KeyKind::Object, true);
        visitor.visit_map(Fields {
            key: None,
            value: self,
        })
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        self.note(KeyKind::Array, false);
        visitor.visit_seq(One(Some(self)))
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Stop> {
        self.note(KeyKind::Array, false);
        visitor.visit_seq(One(Some(self)))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        self.note(KeyKind::Array, false);
        visitor.visit_seq(One(Some(self)))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        self.note(KeyKind::Enum, true);
        Err(Stop("enum".into()))
    }

    zero! {
        deserialize_any => Any, visit_unit(),
        deserialize_unit => Any, visit_unit(),
        deserialize_ignored_any => Any, visit_unit(),
        deserialize_bool => Bool, visit_bool(false),
        deserialize_i8 => Integer, visit_i64(0),
        deserialize_i16 => Integer, visit_i64(0),
        deserialize_i32 => Integer, visit_i64(0),
        deserialize_i64 => Integer, visit_i64(0),
        deserialize_u8 => Integer, visit_u64(0),
        deserialize_u16 => Integer, visit_u64(0),
        deserialize_u32 => Integer, visit_u64(0),
        deserialize_u64 => Integer, visit_u64(0),
        deserialize_f32 => Float, visit_f64(0.0),
        deserialize_f64 => Float, visit_f64(0.0),
        deserialize_char => String, visit_char('0'),
        deserialize_str => String, visit_str(""),
        deserialize_string => String, visit_str(""),
        deserialize_identifier => String, visit_str(""),
        deserialize_bytes => String, visit_bytes(&[]),
        deserialize_byte_buf => String, visit_bytes(&[]),
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_unit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        required_number: u32,
        trunks: Vec<Trunk>,
        nested: Option<Box<Inner>>,
        #[serde(rename = "macspoofchk", alias = "macSpoofChk")]
        mac_spoof_check: bool,
        #[serde(skip)]
        internal: u8,
        value: serde_json::Value,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Trunk {
        #[serde(rename = "minID")]
        min_id: u16,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Inner {
        data_dir: String,
        deeper: Vec<Vec<Trunk>>,
    }

    #[test]
    fn finds_renamed_nested_and_sequence_fields() {
        assert_eq!(
            accepted_keys::<Outer>(),
            [
                "macSpoofChk",
                "macspoofchk",
                "name",
                "nested",
                "nested.dataDir",
                "nested.deeper",
                "nested.deeper.minID",
                "requiredNumber",
                "trunks",
                "trunks.minID",
                "value",
            ]
        );
    }

    #[test]
    fn records_each_key_s_json_kinds() {
        use KeyKind::*;
        let shapes: std::collections::HashMap<std::string::String, Vec<KeyKind>> =
            accepted_key_shapes_at::<Outer>("").into_iter().collect();
        assert_eq!(shapes["name"], [String]);
        assert_eq!(shapes["requiredNumber"], [Integer]);
        assert_eq!(shapes["trunks"], [Array, Object]);
        assert_eq!(shapes["trunks.minID"], [Integer]);
        assert_eq!(shapes["nested"], [Object]);
        assert_eq!(shapes["nested.deeper"], [Array, Array, Object]);
        assert_eq!(shapes["macspoofchk"], [Bool]);
        assert_eq!(shapes["value"], [Any]);
    }

    #[test]
    fn prefixes_paths() {
        assert_eq!(accepted_keys_at::<Trunk>("ipam"), ["ipam.minID"]);
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Flattened {
        own: u8,
        #[serde(flatten)]
        rest: Trunk,
    }

    #[test]
    fn flattened_structs_tell_nothing() {
        assert!(accepted_keys::<Flattened>().is_empty());
    }
}
