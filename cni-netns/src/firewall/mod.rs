//! Firewall programming (masquerade and port mapping) behind the `Firewall`
//! trait, with an nftables backend. Filled in on its own branch.
