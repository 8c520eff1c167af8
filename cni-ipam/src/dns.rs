//! `resolv.conf` parsing for host-local's `resolvConf` option
//! (containernetworking/plugins `plugins/ipam/host-local/dns.go`).

use std::path::Path;

use crate::error::{Error, Result};
use crate::result::Dns;

/// Parses resolv.conf text: `nameserver` (one per line), `domain` (last
/// wins), `search` and `options` (all words appended); blank lines, `#` and
/// `;` comments, unknown keywords and keyword-only lines are skipped.
pub(crate) fn parse_resolv_conf_str(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [keyword, first, ref rest @ ..] = fields[..] else {
            continue;
        };
        match keyword {
            "nameserver" => dns.nameservers.push(first.to_string()),
            "domain" => dns.domain = first.to_string(),
            "search" => dns.search.extend(
                std::iter::once(first)
                    .chain(rest.iter().copied())
                    .map(String::from),
            ),
            "options" => dns.options.extend(
                std::iter::once(first)
                    .chain(rest.iter().copied())
                    .map(String::from),
            ),
            _ => {}
        }
    }
    dns
}

/// Reads and parses a resolv.conf file.
pub(crate) fn parse_resolv_conf(path: &Path) -> Result<Dns> {
    let bytes = cni_files::capped::read_file(path, cni_files::capped::MAX_ADMIN_FILE)
        .map_err(|e| Error::io("read resolvConf", path, e))?;
    Ok(parse_resolv_conf_str(&String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_dns_test_vector() {
        let dns = parse_resolv_conf_str(
            "# a comment\n; another\nnameserver 10.0.0.1\nnameserver 2001:db8::1\n\
             domain example.com\nsearch a.example.com b.example.com\n\
             options ndots:5 timeout:2\noptions attempts:3\nnameserver\nsortlist 1.2.3.4\n",
        );
        assert_eq!(dns.nameservers, ["10.0.0.1", "2001:db8::1"]);
        assert_eq!(dns.domain, "example.com");
        assert_eq!(dns.search, ["a.example.com", "b.example.com"]);
        assert_eq!(dns.options, ["ndots:5", "timeout:2", "attempts:3"]);
    }
}
