//! The integration tests of `cni-plugins`, one binary: a module per area, the
//! shared fixtures beside them (`cargo test -p cni-plugins --test plugins [FILTER]`).

// Tests panic on what they did not expect: unwrap and expect are their
// assertions (denied in library code by the workspace's lints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod census_support;
mod common;
mod fake_kernel_support;
mod host_local_support;
#[path = "common/nodenet.rs"]
mod nodenet;
mod prom_support;
mod ptp_common;
mod reliability_support;
mod tuning_bandwidth_common;

mod add_rollback;
mod bandwidth;
mod bridge_behaviour;
mod bridge_differential;
mod cni_gc;
mod containerd_cri;
mod dhcp;
mod flannel_e2e;
mod flannel_plugin;
mod fuzz_regressions;
mod gc_trace;
mod host_device;
mod host_local_go;
mod host_local_input;
mod host_local_stress;
mod input_limits;
mod ipv6_dad;
mod ipvlan;
mod leak_census;
mod link_plugins;
mod link_plugins_fake;
mod loopback;
mod macvlan;
mod macvlan_flannel;
mod multus_capabilities;
mod multus_devices;
mod multus_e2e;
mod multus_events;
mod multus_flow;
mod multus_gocache;
mod multus_inprocess;
mod multus_k8s;
mod multus_limits;
mod multus_logging;
mod multus_reference;
mod multus_thick;
mod multus_thick_certs;
mod multus_thick_keys;
mod multus_thick_watch;
mod multus_trace;
mod node_tables_conformance;
mod operator;
mod portmap_traffic;
mod ptp;
mod reliability_faults;
mod reliability_soak;
mod reliability_vanishing;
mod same_build;
mod sbr_firewall;
mod static_ipam;
mod step_spans;
mod teardown_faults;
mod trace_chain;
mod trait_plugins_fake;
mod tuning;
