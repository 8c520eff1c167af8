//! `CNI_ARGS`: `K=V;K=V` pairs, with the Go reference's parsing rules.

use std::str::FromStr;

use crate::Error;

/// The Kubernetes keys runtimes put in `CNI_ARGS`.
pub mod k8s {
    /// Pod name.
    pub const POD_NAME: &str = "K8S_POD_NAME";
    /// Pod namespace.
    pub const POD_NAMESPACE: &str = "K8S_POD_NAMESPACE";
    /// Sandbox (infra) container id.
    pub const POD_INFRA_CONTAINER_ID: &str = "K8S_POD_INFRA_CONTAINER_ID";
    /// Pod UID.
    pub const POD_UID: &str = "K8S_POD_UID";
}

/// The key that makes unknown keys acceptable.
pub const IGNORE_UNKNOWN: &str = "IgnoreUnknown";

/// Parsed `CNI_ARGS`.
///
/// Keys are case-sensitive: the Go reference matches them to struct field
/// names (`IP`, `MAC`, `K8S_POD_NAME`, `IgnoreUnknown`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

/// Parses a boolean as Go's `UnmarshallableBool`: `1`/`true`/`0`/`false`,
/// any case.
pub fn parse_bool(s: &str) -> Option<bool> {
    if s == "1" || s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s == "0" || s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

impl CniArgs {
    /// Parses `K=V;K=V`. The empty string is no args; every pair must split
    /// on `=` into exactly two parts (so values containing `=` and trailing
    /// `;` are errors, as in the reference).
    pub fn parse(s: &str) -> Result<Self, Error> {
        if s.is_empty() {
            return Ok(CniArgs::default());
        }
        let mut pairs = Vec::new();
        for pair in s.split(';') {
            let kv: Vec<&str> = pair.split('=').collect();
            if kv.len() != 2 {
                return Err(Error::Args(format!("invalid pair {pair:?}")));
            }
            pairs.push((kv[0].to_string(), kv[1].to_string()));
        }
        Ok(CniArgs { pairs })
    }

    /// The value of `key` (the last one when repeated, as Go's reflection
    /// assignment leaves it).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key` parsed as `T`; an unparsable value is an error
    /// naming the pair.
    pub fn get_parsed<T: FromStr>(&self, key: &str) -> Result<Option<T>, Error>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(key) {
            None => Ok(None),
            // The stray `)` is the reference's (pkg/types/args.go).
            Some(v) => v.parse::<T>().map(Some).map_err(|e| {
                Error::Args(format!("error parsing value of pair \"{key}={v}\": {e})"))
            }),
        }
    }

    /// All pairs, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// True when no pair was given.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// `IgnoreUnknown` as a boolean (false when absent).
    pub fn ignore_unknown(&self) -> Result<bool, Error> {
        match self.get(IGNORE_UNKNOWN) {
            None => Ok(false),
            Some(v) => parse_bool(v).ok_or_else(|| {
                Error::Args(format!(
                    "error parsing value of pair \"{IGNORE_UNKNOWN}={v}\": boolean unmarshal error: invalid input {})",
                    v.to_lowercase()
                ))
            }),
        }
    }

    /// Fails when a key is not in `known` (nor `IgnoreUnknown`), unless
    /// `IgnoreUnknown` is true — the reference's `LoadArgs` behaviour for a
    /// plugin whose args struct has the `known` fields.
    pub fn check_known(&self, known: &[&str]) -> Result<(), Error> {
        if self.ignore_unknown()? {
            return Ok(());
        }
        let unknown: Vec<String> = self
            .pairs
            .iter()
            .filter(|(k, _)| k != IGNORE_UNKNOWN && !known.contains(&k.as_str()))
            .map(|(k, v)| format!("{:?}", format!("{k}={v}")))
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            // Go's `%q` of a []string: quoted items separated by spaces.
            Err(Error::Args(format!("unknown args [{}]", unknown.join(" "))))
        }
    }

    /// `K8S_POD_NAME`.
    pub fn k8s_pod_name(&self) -> Option<&str> {
        self.get(k8s::POD_NAME)
    }
    /// `K8S_POD_NAMESPACE`.
    pub fn k8s_pod_namespace(&self) -> Option<&str> {
        self.get(k8s::POD_NAMESPACE)
    }
    /// `K8S_POD_INFRA_CONTAINER_ID`.
    pub fn k8s_pod_infra_container_id(&self) -> Option<&str> {
        self.get(k8s::POD_INFRA_CONTAINER_ID)
    }
    /// `K8S_POD_UID`.
    pub fn k8s_pod_uid(&self) -> Option<&str> {
        self.get(k8s::POD_UID)
    }
}

impl std::fmt::Display for CniArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (k, v)) in self.pairs.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn parse_and_get() {
        let a = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=web;IP=10.0.0.5").unwrap();
        assert_eq!(a.k8s_pod_name(), Some("web"));
        assert_eq!(
            a.get_parsed::<IpAddr>("IP").unwrap().unwrap().to_string(),
            "10.0.0.5"
        );
        assert!(a.ignore_unknown().unwrap());
        assert_eq!(
            a.to_string(),
            "IgnoreUnknown=1;K8S_POD_NAME=web;IP=10.0.0.5"
        );
        assert!(CniArgs::parse("").unwrap().is_empty());
    }

    #[test]
    fn bad_pairs() {
        assert_eq!(
            CniArgs::parse("A=b=c").unwrap_err().to_string(),
            "ARGS: invalid pair \"A=b=c\""
        );
        assert!(CniArgs::parse("A=b;").is_err());
        assert!(CniArgs::parse("Ab").is_err());
        let a = CniArgs::parse("IP=x").unwrap();
        assert!(a.get_parsed::<IpAddr>("IP").is_err());
    }

    #[test]
    fn unknown_keys() {
        let a = CniArgs::parse("FOO=bar").unwrap();
        assert_eq!(
            a.check_known(&["IP"]).unwrap_err().to_string(),
            "ARGS: unknown args [\"FOO=bar\"]"
        );
        assert_eq!(
            a.check_known(&["IP"]).unwrap_err().code(),
            crate::ErrorCode::InvalidEnvironmentVariables
        );
        assert!(CniArgs::parse("IgnoreUnknown=True;FOO=bar")
            .unwrap()
            .check_known(&[])
            .is_ok());
        assert!(CniArgs::parse("IgnoreUnknown=maybe")
            .unwrap()
            .ignore_unknown()
            .is_err());
    }
}
