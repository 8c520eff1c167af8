//! Bounds on what a result may hold, enforced while its JSON is read.
//!
//! A plugin's stdin is capped (16 MiB), but JSON grows in memory: a
//! `prevResult` of 380,000 one-key interfaces (8 MB of text) costs a plugin
//! gigabytes once decoded and copied. So a result (a config's `prevResult`,
//! a delegate's or an IPAM plugin's answer) is read with limits far above
//! any real attachment, counted as the JSON is parsed: past a limit the
//! read stops at once, before the values are built, with an error naming
//! the key ([`Error::ResultTooLarge`], code 7).
//!
//! | what | limit |
//! |---|---|
//! | `interfaces` | [`MAX_INTERFACES`] (1024) |
//! | `ips` | [`MAX_IPS`] (4096) |
//! | `routes` (also `ip4.routes`/`ip6.routes` of 0.2.0) | [`MAX_ROUTES`] (4096) |
//! | `dns.nameservers`, `dns.search`, `dns.options` | [`MAX_DNS_ENTRIES`] (1024) each |
//! | any other array inside a result | [`MAX_OTHER_ENTRIES`] (4096) |
//! | JSON values in the whole result | [`MAX_RESULT_VALUES`] (131072) |
//!
//! A whole network configuration holds at most [`MAX_CONFIG_VALUES`]
//! (262144) JSON values ([`Error::ConfigTooLarge`], code 7), counted the
//! same way.
//!
//! ```
//! use cni_types::{limits, Error, NetworkConfig};
//!
//! let interfaces = vec![serde_json::json!({"name": "x"}); limits::MAX_INTERFACES + 1];
//! let conf = serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "bridge",
//!     "prevResult": {"cniVersion": "1.0.0", "interfaces": interfaces}});
//! let e = NetworkConfig::from_slice(&serde_json::to_vec(&conf)?).unwrap_err();
//! assert!(matches!(e, Error::ResultTooLarge { .. }));
//! assert_eq!(e.to_string(), "prevResult.interfaces: more than 1024 entries (the limit for a result)");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::Error;

/// The most interfaces a result may list.
pub const MAX_INTERFACES: usize = 1024;
/// The most addresses a result may list.
pub const MAX_IPS: usize = 4096;
/// The most routes a result may list.
pub const MAX_ROUTES: usize = 4096;
/// The most entries of each of a result's `dns` lists (`nameservers`,
/// `search`, `options`).
pub const MAX_DNS_ENTRIES: usize = 1024;
/// The most entries of any other array inside a result (a key the spec
/// does not define).
pub const MAX_OTHER_ENTRIES: usize = 4096;
/// The most JSON values (objects, arrays, strings, numbers... each counts
/// one) in a whole result: twice what a result at every list limit holds.
pub const MAX_RESULT_VALUES: usize = 131_072;

/// The most JSON values in a whole network configuration (a plugin's
/// stdin): what keeps the memory of any key of it, not only `prevResult`,
/// bounded (a 14 MB array of zeros cost a plugin 1 GB). A GC request
/// listing 10,000 attachments holds some 30,000.
pub const MAX_CONFIG_VALUES: usize = 262_144;

/// The limit for an array under `key`.
fn array_limit(key: &str) -> usize {
    let is = |k: &str| key.eq_ignore_ascii_case(k);
    if is("interfaces") {
        MAX_INTERFACES
    } else if is("ips") {
        MAX_IPS
    } else if is("routes") {
        MAX_ROUTES
    } else if is("nameservers") || is("search") || is("options") {
        MAX_DNS_ENTRIES
    } else {
        MAX_OTHER_ENTRIES
    }
}

/// Reads the JSON text of a result (`what` names it in errors, e.g.
/// `"result"`) with the limits applied.
pub fn result_value_from_slice(bytes: &[u8], what: &str) -> Result<Value, Error> {
    let budget = Budget::new();
    let root = Path::root(what);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Bounded {
        budget: &budget,
        path: &root,
        key: what,
        in_result: true,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    value.map_err(|e| budget.error(e, what))
}

/// Reads the JSON text of a network configuration, its `prevResult` (any
/// spelling of the key) with the result limits applied.
pub fn config_value_from_slice(bytes: &[u8]) -> Result<Value, Error> {
    let budget = Budget::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Config { budget: &budget }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    value.map_err(|e| budget.error(e, "network configuration"))
}

/// The count of values read so far and the first limit passed.
struct Budget {
    /// Values of the result(s) read.
    values: std::cell::Cell<usize>,
    /// Values of the whole input.
    all: std::cell::Cell<usize>,
    exceeded: RefCell<Option<Error>>,
}

impl Budget {
    fn new() -> Self {
        Budget {
            values: std::cell::Cell::new(0),
            all: std::cell::Cell::new(0),
            exceeded: RefCell::new(None),
        }
    }

    /// Counts one value (of a result when `in_result`); past a limit,
    /// records it and fails.
    fn take<E: de::Error>(&self, path: &Path<'_>, in_result: bool) -> Result<(), E> {
        let all = self.all.get() + 1;
        self.all.set(all);
        if all > MAX_CONFIG_VALUES {
            let e = Error::ConfigTooLarge {
                limit: MAX_CONFIG_VALUES,
            };
            let msg = e.to_string();
            self.exceeded.borrow_mut().get_or_insert(e);
            return Err(E::custom(msg));
        }
        if !in_result {
            return Ok(());
        }
        let n = self.values.get() + 1;
        self.values.set(n);
        if n > MAX_RESULT_VALUES {
            return Err(self.exceed(path.root_name(), MAX_RESULT_VALUES, "JSON values"));
        }
        Ok(())
    }

    fn exceed<E: de::Error>(&self, path: String, limit: usize, what: &'static str) -> E {
        let e = Error::ResultTooLarge { path, limit, what };
        let msg = e.to_string();
        self.exceeded.borrow_mut().get_or_insert(e);
        E::custom(msg)
    }

    /// The error to report for the decoder's `e`: the limit passed, if one
    /// was, else the decoding failure.
    fn error(&self, e: serde_json::Error, what: &str) -> Error {
        self.exceeded.take().unwrap_or_else(|| Error::Decode {
            what: what.into(),
            reason: e.to_string(),
        })
    }
}

/// Where a value is, built only when an error names it.
enum Seg<'a> {
    Root(&'a str),
    Key(&'a str),
    Index(usize),
}

struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
}

impl<'a> Path<'a> {
    fn root(name: &'a str) -> Self {
        Path {
            parent: None,
            seg: Seg::Root(name),
        }
    }

    fn child(&'a self, seg: Seg<'a>) -> Path<'a> {
        Path {
            parent: Some(self),
            seg,
        }
    }

    fn root_name(&self) -> String {
        match (&self.seg, self.parent) {
            (_, Some(p)) => p.root_name(),
            (Seg::Root(name), None) => (*name).to_string(),
            _ => String::new(),
        }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.parent {
            write!(f, "{p}")?;
        }
        match &self.seg {
            Seg::Root(name) => write!(f, "{name}"),
            Seg::Key(k) => write!(f, ".{k}"),
            Seg::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A counted value; inside a result, its arrays bounded by `key`'s limit.
struct Bounded<'a> {
    budget: &'a Budget,
    path: &'a Path<'a>,
    /// The object key the value is under ("" inside an array of arrays).
    key: &'a str,
    /// Whether the value is part of a result (list limits apply).
    in_result: bool,
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.budget.take(self.path, self.in_result)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.budget.take(self.path, self.in_result)?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.budget.take(self.path, self.in_result)?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.budget.take(self.path, self.in_result)?;
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.take(self.path, self.in_result)?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.budget.take(self.path, self.in_result)?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.budget.take(self.path, self.in_result)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.take(self.path, self.in_result)?;
        let limit = if self.in_result {
            array_limit(self.key)
        } else {
            usize::MAX
        };
        let mut out = Vec::new();
        loop {
            let here = self.path.child(Seg::Index(out.len()));
            let element = Bounded {
                budget: self.budget,
                path: &here,
                key: "",
                in_result: self.in_result,
            };
            match seq.next_element_seed(element)? {
                None => return Ok(Value::Array(out)),
                Some(_) if out.len() == limit => {
                    return Err(self.budget.exceed(self.path.to_string(), limit, "entries"))
                }
                Some(v) => out.push(v),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.take(self.path, self.in_result)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let here = self.path.child(Seg::Key(&key));
            let value = map.next_value_seed(Bounded {
                budget: self.budget,
                path: &here,
                key: &key,
                in_result: self.in_result,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A network configuration: any JSON value, its `prevResult` read as a
/// [`Bounded`] result.
struct Config<'a> {
    budget: &'a Budget,
}

impl<'de> DeserializeSeed<'de> for Config<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Config<'_> {
    /// The visitor for a value outside any result.
    fn plain<'p>(&self, path: &'p Path<'p>) -> Bounded<'p>
    where
        Self: 'p,
    {
        Bounded {
            budget: self.budget,
            path,
            key: "",
            in_result: false,
        }
    }
}

const CONFIG: Path<'static> = Path {
    parent: None,
    seg: Seg::Root("network configuration"),
};

impl<'de> Visitor<'de> for Config<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a network configuration")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.plain(&CONFIG).visit_bool(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.plain(&CONFIG).visit_i64(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.plain(&CONFIG).visit_u64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.plain(&CONFIG).visit_f64(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.plain(&CONFIG).visit_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.plain(&CONFIG).visit_string(v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.plain(&CONFIG).visit_unit()
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.plain(&CONFIG).visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.plain(&CONFIG).visit_some(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        self.plain(&CONFIG).visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.take::<A::Error>(&CONFIG, false)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let here = Path::root(&key);
            let value = map.next_value_seed(Bounded {
                budget: self.budget,
                path: &here,
                key: &key,
                in_result: key.eq_ignore_ascii_case("prevResult"),
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf_with(prev: Value) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"cniVersion": "1.0.0", "name": "n", "type": "x", "prevResult": prev}),
        )
        .unwrap()
    }

    #[test]
    fn lists_at_their_limit_are_read_past_it_refused_naming_the_key() {
        let ifs = vec![json!({"name": "x"}); MAX_INTERFACES];
        let v = config_value_from_slice(&conf_with(json!({"interfaces": ifs}))).unwrap();
        assert_eq!(
            v["prevResult"]["interfaces"].as_array().unwrap().len(),
            MAX_INTERFACES
        );
        for (prev, path, limit) in [
            (
                json!({"interfaces": vec![json!({}); MAX_INTERFACES + 1]}),
                "prevResult.interfaces",
                MAX_INTERFACES,
            ),
            (
                json!({"ips": vec![json!(1); MAX_IPS + 1]}),
                "prevResult.ips",
                MAX_IPS,
            ),
            (
                json!({"ip4": {"routes": vec![json!(1); MAX_ROUTES + 1]}}),
                "prevResult.ip4.routes",
                MAX_ROUTES,
            ),
            (
                json!({"dns": {"search": vec![json!("a"); MAX_DNS_ENTRIES + 1]}}),
                "prevResult.dns.search",
                MAX_DNS_ENTRIES,
            ),
            (
                json!({"interfaces": [{"x": vec![json!(0); MAX_OTHER_ENTRIES + 1]}]}),
                "prevResult.interfaces[0].x",
                MAX_OTHER_ENTRIES,
            ),
        ] {
            let e = config_value_from_slice(&conf_with(prev)).unwrap_err();
            assert_eq!(
                e,
                Error::ResultTooLarge {
                    path: path.into(),
                    limit,
                    what: "entries"
                }
            );
            assert_eq!(e.code(), crate::ErrorCode::InvalidNetworkConfig);
        }
        // A result read on its own is named as the caller says.
        let e = result_value_from_slice(
            &serde_json::to_vec(&json!({"routes": vec![json!(0); MAX_ROUTES + 1]})).unwrap(),
            "result",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "result.routes: more than 4096 entries (the limit for a result)"
        );
    }

    #[test]
    fn a_decoded_value_past_a_limit_is_refused() {
        let v = json!({"cniVersion": "1.0.0", "interfaces": vec![json!({"name": "x"}); MAX_INTERFACES + 1]});
        let e = crate::CniResult::from_value(&v, crate::Version::V1_0_0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "result.interfaces: more than 1024 entries (the limit for a result)"
        );
    }

    #[test]
    fn values_are_counted_across_the_whole_result() {
        let many: Vec<Value> = (0..40).map(|_| json!(vec![json!([0]); 4000])).collect();
        let e = config_value_from_slice(&conf_with(json!({ "x": many }))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "prevResult: more than 131072 JSON values (the limit for a result)"
        );
    }

    /// Any key of a configuration counts towards its limit: a plugin's own
    /// array of millions of zeros is refused, not built.
    #[test]
    fn a_configuration_past_its_value_limit_is_refused() {
        let at = format!(
            r#"{{"name":"n","x":[{}]}}"#,
            vec!["0"; MAX_CONFIG_VALUES - 3].join(",")
        );
        config_value_from_slice(at.as_bytes()).unwrap();
        let past = format!(
            r#"{{"name":"n","x":[{}]}}"#,
            vec!["0"; MAX_CONFIG_VALUES - 2].join(",")
        );
        let e = config_value_from_slice(past.as_bytes()).unwrap_err();
        assert_eq!(
            e,
            Error::ConfigTooLarge {
                limit: MAX_CONFIG_VALUES
            }
        );
        assert_eq!(
            e.to_string(),
            "network configuration: more than 262144 JSON values (the limit for a configuration)"
        );
        assert_eq!(e.code(), crate::ErrorCode::InvalidNetworkConfig);
    }

    #[test]
    fn other_keys_and_shapes_read_as_before() {
        let text = br#"{"cniVersion":"1.0.0","name":"n","big":[1,2,3],"PrevResult":{"ips":[{"address":"10.0.0.2/24"}],"n":1.5,"z":null,"b":true}}"#;
        let v = config_value_from_slice(text).unwrap();
        assert_eq!(v, serde_json::from_slice::<Value>(text).unwrap());
        for other in [&b"null"[..], b"[1,{}]", b"\"s\"", b"7"] {
            assert_eq!(
                config_value_from_slice(other).unwrap(),
                serde_json::from_slice::<Value>(other).unwrap()
            );
        }
        let e = config_value_from_slice(b"{\"a\":").unwrap_err();
        assert!(matches!(e, Error::Decode { .. }), "{e:?}");
        assert!(config_value_from_slice(b"{} x").is_err());
    }
}
