//! `CNI_ARGS` and the name validators on arbitrary strings.
#![no_main]

use cni_types::{validate, CniArgs};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    if let Ok(args) = CniArgs::parse(&s) {
        let _ = args.ignore_unknown();
        let _ = args.check_known(&["IgnoreUnknown", "K8S_POD_NAME", "IP"]);
        let _ = args.k8s_pod_name();
        let _ = args.k8s_pod_namespace();
        let _ = args.k8s_pod_infra_container_id();
        let _ = args.k8s_pod_uid();
        let _ = args.get_parsed::<std::net::IpAddr>("IP");
        let _ = args.get_parsed::<u32>("MTU");
        for (k, v) in args.pairs() {
            assert!(args.get(k).is_some());
            let _ = cni_types::args::parse_bool(v);
        }
        let _ = args.is_empty();
    }
    let _ = validate::network_name(&s);
    let _ = validate::container_id(&s);
    let _ = validate::interface_name(&s);
    let _ = cni_exec::skel::split_path(&s);
    let _ = cni_types::Version::parse(&s);
    let _ = cni_types::json::parse_cidr(&s);
    // The IPAM plugins read `IP=` (and friends) from `CNI_ARGS` themselves.
    let _ = cni_ipam::host_local::HostLocalConfig::load(HOST_LOCAL, &s);
    let _ = cni_ipam::static_ipam::StaticConfig::load(STATIC, &s);
});

const HOST_LOCAL: &[u8] = br#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local",
    "dataDir":"/nonexistent-cni-fuzz","ranges":[[{"subnet":"10.1.0.0/16"}],[{"subnet":"2001:db8::/64"}]]}}"#;
const STATIC: &[u8] = br#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"static",
    "addresses":[{"address":"10.1.0.5/24"}]}}"#;
