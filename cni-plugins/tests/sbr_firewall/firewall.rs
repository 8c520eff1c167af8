//! firewall: see below.
