//! Cost of one ADD and one DEL of port mappings (and masquerade) with 50
//! and 1000 attachments already present (root; ignored by default):
//!
//! ```text
//! cargo test -p cni-netns --release --test firewall_perf -- --ignored --nocapture
//! ```

#![allow(clippy::print_stdout)] // a measurement prints its figures

mod firewall_common;

use std::time::{Duration, Instant};

use cni_netns::firewall::{
    AttachmentId, Firewall, MasqueradeSpec, NftFirewall, PortMapping, PortMappingSpec, Protocol,
};
use firewall_common::*;

fn pm(i: u32) -> PortMappingSpec {
    let mut s = PortMappingSpec::new(AttachmentId::new("perfnet", format!("{i:064x}"), "eth0"));
    s.container_v4 = Some(
        format!("10.{}.{}.{}/8", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff)
            .parse()
            .unwrap(),
    );
    s.mappings = vec![
        PortMapping {
            host_port: (10000 + 2 * i) as u16,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        },
        PortMapping {
            host_port: (10001 + 2 * i) as u16,
            container_port: 53,
            protocol: Protocol::Udp,
            host_ip: None,
        },
    ];
    s
}

fn masq(i: u32) -> MasqueradeSpec {
    MasqueradeSpec {
        attachment: AttachmentId::new("perfnet", format!("{i:064x}"), "eth0"),
        address: format!("10.{}.{}.{}/8", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff)
            .parse()
            .unwrap(),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
#[ignore = "measurement; run with --ignored --nocapture as root"]
fn add_and_delete_cost_does_not_grow_with_attachments() {
    if skip_unless_root() {
        return;
    }
    let ns = TestNs::new("fwperf");
    let fw = NftFirewall::in_netns(ns.path());
    let mut present = 0u32;
    for target in [50u32, 1000] {
        while present < target {
            fw.add_port_mappings(&pm(present)).unwrap();
            fw.add_masquerade(&masq(present)).unwrap();
            present += 1;
        }
        let (mut pm_add, mut pm_del, mut m_add, mut m_del) = (vec![], vec![], vec![], vec![]);
        let mut pm_del_again = vec![];
        for round in 0..21 {
            let probe = 20000 + round;
            let t = Instant::now();
            fw.add_port_mappings(&pm(probe)).unwrap();
            pm_add.push(t.elapsed());
            let t = Instant::now();
            fw.del_port_mappings(&pm(probe)).unwrap();
            pm_del.push(t.elapsed());
            let t = Instant::now();
            fw.del_port_mappings(&pm(probe)).unwrap();
            pm_del_again.push(t.elapsed());
            let t = Instant::now();
            fw.add_masquerade(&masq(probe)).unwrap();
            m_add.push(t.elapsed());
            let t = Instant::now();
            fw.del_masquerade(&masq(probe)).unwrap();
            m_del.push(t.elapsed());
        }
        let t = Instant::now();
        let listed = fw
            .list_attachments(cni_netns::firewall::RuleKind::PortMapping)
            .unwrap();
        let list_time = t.elapsed();
        assert_eq!(listed.len(), present as usize);
        println!(
            "{present:>5} attachments present: port mappings add {:?} del {:?} del-again {:?}; masquerade add {:?} del {:?} (medians of 21); list {:?}",
            median(pm_add),
            median(pm_del),
            median(pm_del_again),
            median(m_add),
            median(m_del),
            list_time,
        );
    }
}
