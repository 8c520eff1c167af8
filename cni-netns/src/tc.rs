//! Traffic control over rtnetlink: a token bucket (TBF) root qdisc, the
//! ingress qdisc, a match-everything filter whose mirred action redirects to
//! another device, IFB devices to redirect to, listings, and deletion.
//!
//! This is what the bandwidth plugin needs, built the way Go's
//! `vishvananda/netlink` builds it (containernetworking/plugins
//! `plugins/meta/bandwidth/ifb_creator.go`), so the kernel state is the same
//! as the reference's. No `tc` process is involved.
//!
//! The TBF parameters follow iproute2's units: the rate in bytes per
//! second, the limit in bytes and the bucket size (`buffer`) in scheduler
//! ticks, which [`PschedClock`] converts from microseconds.

use netlink_packet_core::{DefaultNla, Nla, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionGeneric, TcActionMirrorOption, TcActionOption,
    TcActionType, TcAttribute, TcFilterMatchAllOption, TcFilterU32Option, TcHandle, TcMessage,
    TcMirror, TcMirrorActionType, TcOption, TcU32Key, TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::Result;
use crate::handle::Handle;
use crate::link::Link;

/// `TC_H_ROOT`: the parent of a root qdisc.
pub const HANDLE_ROOT: u32 = 0xffff_ffff;
/// `TC_H_INGRESS` (`ffff:fff1`): the parent of the ingress qdisc.
pub const HANDLE_INGRESS: u32 = 0xffff_fff1;
/// `ffff:0`: the handle of the ingress qdisc, and the parent of its filters.
pub const INGRESS_QDISC_HANDLE: u32 = 0xffff_0000;
/// `1:0`: the handle the bandwidth plugin gives its root TBF.
pub const TBF_HANDLE: u32 = 0x0001_0000;
/// `ETH_P_ALL`: a filter protocol matching every frame.
pub const ETH_P_ALL: u16 = 0x0003;
/// `TIME_UNITS_PER_SEC` of iproute2 and `vishvananda/netlink`.
pub const TIME_UNITS_PER_SEC: f64 = 1_000_000.0;

// linux/pkt_sched.h: TCA_TBF_*
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
// linux/rtnetlink.h: TCA_OPTIONS
const TCA_OPTIONS: u16 = 2;
const TBF_QOPT_LEN: usize = 36;

/// The kernel's packet scheduler clock (`/proc/net/psched`), which turns
/// times into the ticks a TBF `buffer` is expressed in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PschedClock {
    /// Ticks per microsecond.
    pub tick_in_usec: f64,
}

impl Default for PschedClock {
    /// The clock of every kernel since 2.6.31 (`psched` reports
    /// `3e8 40 f4240 ...`: 1000/64 ticks per microsecond).
    fn default() -> Self {
        PschedClock {
            tick_in_usec: 15.625,
        }
    }
}

impl PschedClock {
    /// Reads `/proc/net/psched` (the default clock when it cannot be read,
    /// where Go's netlink would divide by zero).
    pub fn read() -> PschedClock {
        std::fs::read_to_string("/proc/net/psched")
            .ok()
            .and_then(|s| PschedClock::parse(&s))
            .unwrap_or_default()
    }

    /// Parses the text of `/proc/net/psched` as `vishvananda/netlink`'s
    /// `initClock` does (four hex numbers: t2us, us2t, clock resolution,
    /// hz).
    pub fn parse(text: &str) -> Option<PschedClock> {
        let vals: Vec<u64> = text
            .split_whitespace()
            .take(4)
            .map(|p| u64::from_str_radix(p, 16).ok())
            .collect::<Option<_>>()?;
        let [mut t2us, us2t, res, _hz] = <[u64; 4]>::try_from(vals).ok()?;
        if us2t == 0 {
            return None;
        }
        // iproute2's compatibility rule for a nanosecond clock.
        if res == 1_000_000_000 {
            t2us = us2t;
        }
        let clock_factor = res as f64 / TIME_UNITS_PER_SEC;
        Some(PschedClock {
            tick_in_usec: t2us as f64 / us2t as f64 * clock_factor,
        })
    }

    /// Microseconds to ticks (Go's `time2Tick`, truncating like it).
    pub fn time_to_tick(&self, usec: u32) -> u32 {
        (usec as f64 * self.tick_in_usec) as u32
    }
}

/// A token bucket filter's parameters, in the kernel's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    /// Rate, bytes per second.
    pub rate: u64,
    /// Queue limit, bytes.
    pub limit: u32,
    /// Bucket size, scheduler ticks.
    pub buffer: u32,
}

impl Tbf {
    /// The bandwidth plugin's TBF for a rate in bits per second and a burst
    /// in bits, with 25 ms of queueing latency: Go's `createTBF` arithmetic
    /// (`buffer`, `limit`, `latencyInUsec` in `ifb_creator.go`), float
    /// truncations included, so that CHECK compares equal to Go's.
    pub fn from_rate_and_burst(rate_bits: u64, burst_bits: u64, clock: PschedClock) -> Tbf {
        const LATENCY_MS: f64 = 25.0;
        let rate = rate_bits / 8;
        let burst = (burst_bits / 8) as u32;
        let buffer = if rate == 0 {
            0
        } else {
            clock.time_to_tick((burst as f64 * TIME_UNITS_PER_SEC / rate as f64) as u32)
        };
        let latency = TIME_UNITS_PER_SEC * (LATENCY_MS / 1000.0);
        let limit = ((rate as f64 * latency / TIME_UNITS_PER_SEC) as u32).wrapping_add(burst);
        Tbf {
            rate,
            limit,
            buffer,
        }
    }

    /// `TCA_OPTIONS` of a `tbf` qdisc: `TCA_TBF_PARMS` (`struct
    /// tc_tbf_qopt`: rate and peak rate `tc_ratespec`, limit, buffer, mtu)
    /// and `TCA_TBF_RATE64` when the rate does not fit 32 bits. Like Go,
    /// no rate table and no `TCA_TBF_BURST`: the kernel derives the burst
    /// from `buffer`.
    fn options(&self) -> Vec<TcOption> {
        let mut qopt = [0u8; TBF_QOPT_LEN];
        qopt[8..12].copy_from_slice(&(self.rate.min(u32::MAX as u64) as u32).to_ne_bytes());
        qopt[24..28].copy_from_slice(&self.limit.to_ne_bytes());
        qopt[28..32].copy_from_slice(&self.buffer.to_ne_bytes());
        let mut opts = vec![TcOption::Other(DefaultNla::new(
            TCA_TBF_PARMS,
            qopt.to_vec(),
        ))];
        if self.rate >= 1 << 32 {
            opts.push(TcOption::Other(DefaultNla::new(
                TCA_TBF_RATE64,
                self.rate.to_ne_bytes().to_vec(),
            )));
        }
        opts
    }

    /// Decodes the nested `TCA_OPTIONS` payload of a dumped `tbf` qdisc.
    fn parse(nested: &[u8]) -> Option<Tbf> {
        let mut tbf = None;
        let mut rate64 = None;
        for (kind, v) in crate::netlink::attrs(nested) {
            match kind {
                TCA_TBF_PARMS if v.len() >= TBF_QOPT_LEN => {
                    let u32_at =
                        |o: usize| u32::from_ne_bytes([v[o], v[o + 1], v[o + 2], v[o + 3]]);
                    tbf = Some(Tbf {
                        rate: u32_at(8) as u64,
                        limit: u32_at(24),
                        buffer: u32_at(28),
                    });
                }
                TCA_TBF_RATE64 if v.len() >= 8 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&v[..8]);
                    rate64 = Some(u64::from_ne_bytes(b));
                }
                _ => {}
            }
        }
        let mut tbf = tbf?;
        if let Some(r) = rate64 {
            tbf.rate = r;
        }
        Some(tbf)
    }
}

/// A queueing discipline as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Qdisc {
    /// Interface index.
    pub index: u32,
    /// Handle (`major << 16 | minor`).
    pub handle: u32,
    /// Parent handle ([`HANDLE_ROOT`], [`HANDLE_INGRESS`], or a class).
    pub parent: u32,
    /// Kind (`"tbf"`, `"ingress"`, `"noqueue"`, ...).
    pub kind: String,
    /// The TBF parameters when `kind` is `"tbf"`.
    pub tbf: Option<Tbf>,
}

/// A classifier (filter) as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Filter {
    /// Interface index.
    pub index: u32,
    /// Parent qdisc handle.
    pub parent: u32,
    /// Filter handle.
    pub handle: u32,
    /// Priority (preference).
    pub priority: u16,
    /// Protocol, host byte order ([`ETH_P_ALL`], ...).
    pub protocol: u16,
    /// Kind (`"u32"`, `"matchall"`, ...).
    pub kind: String,
    /// The target interface index of each mirred egress redirect action.
    pub redirects: Vec<u32>,
}

/// Which classifier [`Handle::add_redirect_filter`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedirectFilterKind {
    /// `u32` with one zero key (matches everything) and class `1:1`, with
    /// the mirred action twice: Go's bandwidth plugin passes the target
    /// both as `RedirIndex` and as an explicit action, and netlink encodes
    /// both (the second never runs: the first steals the packet).
    #[default]
    U32GoCompatible,
    /// `u32` match-all with one mirred action.
    U32,
    /// `matchall` with one mirred action.
    MatchAll,
}

fn tc_message(index: u32, handle: u32, parent: u32) -> TcMessage {
    let mut m = TcMessage::default();
    m.header.index = index as i32;
    m.header.handle = TcHandle::from(handle);
    m.header.parent = TcHandle::from(parent);
    m
}

fn mirred_redirect(tab: u16, target: u32, verdict: TcActionType) -> TcAction {
    let mut generic = TcActionGeneric::default();
    generic.action = verdict;
    let mut parms = TcMirror::default();
    parms.generic = generic;
    parms.eaction = TcMirrorActionType::EgressRedir;
    parms.ifindex = target;
    let mut action = TcAction::default();
    action.tab = tab;
    action.attributes = vec![
        TcActionAttribute::Kind("mirred".into()),
        TcActionAttribute::Options(vec![TcActionOption::Mirror(TcActionMirrorOption::Parms(
            parms,
        ))]),
    ];
    action
}

fn redirect_targets(actions: &[TcAction]) -> Vec<u32> {
    let mut out = Vec::new();
    for a in actions {
        for attr in &a.attributes {
            if let TcActionAttribute::Options(opts) = attr {
                for o in opts {
                    if let TcActionOption::Mirror(TcActionMirrorOption::Parms(p)) = o {
                        if p.eaction == TcMirrorActionType::EgressRedir {
                            out.push(p.ifindex);
                        }
                    }
                }
            }
        }
    }
    out
}

pub(crate) fn filter_message(
    index: u32,
    parent: u32,
    priority: u16,
    target: u32,
    kind: RedirectFilterKind,
) -> TcMessage {
    let mut m = tc_message(index, 0, parent);
    m.header.info = ((priority as u32) << 16) | ETH_P_ALL.to_be() as u32;
    let opts = match kind {
        RedirectFilterKind::U32GoCompatible | RedirectFilterKind::U32 => {
            let mut sel = TcU32Selector::default();
            sel.flags = TcU32SelectorFlags::Terminal;
            sel.nkeys = 1;
            sel.keys = vec![TcU32Key::default()];
            let mut actions = vec![mirred_redirect(1, target, TcActionType::Stolen)];
            if kind == RedirectFilterKind::U32GoCompatible {
                actions.push(mirred_redirect(2, target, TcActionType::Ok));
            }
            m.attributes.push(TcAttribute::Kind("u32".into()));
            vec![
                TcOption::U32(TcFilterU32Option::Selector(sel)),
                TcOption::U32(TcFilterU32Option::ClassId(TcHandle::from(0x0001_0001))),
                TcOption::U32(TcFilterU32Option::Action(actions)),
            ]
        }
        RedirectFilterKind::MatchAll => {
            m.attributes.push(TcAttribute::Kind("matchall".into()));
            vec![TcOption::MatchAll(TcFilterMatchAllOption::Action(vec![
                mirred_redirect(1, target, TcActionType::Stolen),
            ]))]
        }
    };
    m.attributes.push(TcAttribute::Options(opts));
    m
}

pub(crate) fn tbf_message(index: u32, tbf: &Tbf) -> TcMessage {
    let mut m = tc_message(index, TBF_HANDLE, HANDLE_ROOT);
    m.attributes.push(TcAttribute::Kind("tbf".into()));
    m.attributes.push(TcAttribute::Options(tbf.options()));
    m
}

fn qdisc_from_message(m: &TcMessage) -> Qdisc {
    let mut q = Qdisc {
        index: m.header.index as u32,
        handle: m.header.handle.into(),
        parent: m.header.parent.into(),
        kind: String::new(),
        tbf: None,
    };
    for attr in &m.attributes {
        match attr {
            TcAttribute::Kind(k) => q.kind = k.clone(),
            // The crate has no `tbf` decoder: an unknown kind's options
            // arrive as the whole TCA_OPTIONS attribute, nested payload
            // inside.
            TcAttribute::Options(opts) if q.kind == "tbf" => {
                for o in opts {
                    if let TcOption::Other(nla) = o {
                        if nla.kind() == TCA_OPTIONS {
                            let mut buf = vec![0u8; nla.value_len()];
                            nla.emit_value(&mut buf);
                            q.tbf = Tbf::parse(&buf);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    q
}

fn filter_from_message(m: &TcMessage) -> Filter {
    let mut f = Filter {
        index: m.header.index as u32,
        parent: m.header.parent.into(),
        handle: m.header.handle.into(),
        priority: (m.header.info >> 16) as u16,
        protocol: u16::from_be((m.header.info & 0xffff) as u16),
        kind: String::new(),
        redirects: Vec::new(),
    };
    for attr in &m.attributes {
        match attr {
            TcAttribute::Kind(k) => f.kind = k.clone(),
            TcAttribute::Options(opts) => {
                for o in opts {
                    match o {
                        TcOption::U32(TcFilterU32Option::Action(a))
                        | TcOption::MatchAll(TcFilterMatchAllOption::Action(a)) => {
                            f.redirects.extend(redirect_targets(a))
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    f
}

impl Handle {
    /// `tc qdisc add dev <index> root handle 1: tbf ...` (fails with
    /// `EEXIST` when a root qdisc other than the default is present).
    pub fn add_tbf(&self, index: u32, tbf: &Tbf) -> Result<()> {
        self.request(
            RouteNetlinkMessage::NewQueueDiscipline(tbf_message(index, tbf)),
            NLM_F_CREATE | NLM_F_EXCL,
            || {
                format!(
                    "add tbf qdisc (rate {} B/s, limit {} B, buffer {} ticks) to {}",
                    tbf.rate,
                    tbf.limit,
                    tbf.buffer,
                    self.ifname_for(index)
                )
            },
        )
        .map(drop)
    }

    /// `tc qdisc add dev <index> handle ffff: ingress`.
    pub fn add_ingress_qdisc(&self, index: u32) -> Result<()> {
        let mut m = tc_message(index, INGRESS_QDISC_HANDLE, HANDLE_INGRESS);
        m.attributes.push(TcAttribute::Kind("ingress".into()));
        self.request(
            RouteNetlinkMessage::NewQueueDiscipline(m),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add ingress qdisc to {}", self.ifname_for(index)),
        )
        .map(drop)
    }

    /// Adds, under the ingress qdisc of `index`, a filter of priority 1 for
    /// every protocol that redirects every frame to the egress of `target`
    /// (what `tc filter add dev X parent ffff: protocol all prio 1 u32
    /// match u32 0 0 flowid 1:1 action mirred egress redirect dev Y` does).
    pub fn add_redirect_filter(
        &self,
        index: u32,
        target: u32,
        kind: RedirectFilterKind,
    ) -> Result<()> {
        let m = filter_message(index, INGRESS_QDISC_HANDLE, 1, target, kind);
        self.request(
            RouteNetlinkMessage::NewTrafficFilter(m),
            NLM_F_CREATE | NLM_F_EXCL,
            || {
                format!(
                    "add filter redirecting {} to {}",
                    self.ifname_for(index),
                    self.ifname_for(target)
                )
            },
        )
        .map(drop)
    }

    /// The qdiscs of one interface.
    pub fn qdiscs(&self, index: u32) -> Result<Vec<Qdisc>> {
        let r = self.dump(
            RouteNetlinkMessage::GetQueueDiscipline(tc_message(index, 0, 0)),
            || format!("list qdiscs of {}", self.ifname_for(index)),
        )?;
        Ok(r.iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewQueueDiscipline(m) => Some(qdisc_from_message(m)),
                _ => None,
            })
            // The kernel dumps every interface's qdiscs when the index
            // filter is not honoured (old kernels).
            .filter(|q| q.index == index)
            .collect())
    }

    /// The filters of one interface under the qdisc or class `parent`.
    pub fn filters(&self, index: u32, parent: u32) -> Result<Vec<Filter>> {
        let r = self.dump(
            RouteNetlinkMessage::GetTrafficFilter(tc_message(index, 0, parent)),
            || format!("list filters of {}", self.ifname_for(index)),
        )?;
        Ok(r.iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewTrafficFilter(m) => Some(filter_from_message(m)),
                _ => None,
            })
            // Filter chains are dumped with a header-only message first.
            .filter(|f| f.index == index && !f.kind.is_empty())
            .collect())
    }

    /// Deletes the qdisc whose parent is `parent` ([`HANDLE_ROOT`] or
    /// [`HANDLE_INGRESS`]) on `index`, with its filters. A missing qdisc
    /// (or a missing interface) is not an error; returns whether one was
    /// deleted.
    pub fn delete_qdisc(&self, index: u32, parent: u32) -> Result<bool> {
        let present = match self.qdiscs(index) {
            Ok(qs) => qs.into_iter().find(|q| q.parent == parent && q.handle != 0),
            Err(e) if e.is_not_found() || e.errno() == Some(nix::errno::Errno::EINVAL) => None,
            Err(e) => return Err(e),
        };
        let Some(q) = present else {
            return Ok(false);
        };
        let m = tc_message(index, q.handle, parent);
        match self.request(RouteNetlinkMessage::DelQueueDiscipline(m), 0, || {
            format!("delete {} qdisc of {}", q.kind, self.ifname_for(index))
        }) {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Creates an IFB device, up, with this MTU and a transmit queue length
    /// of 0 (Go's `CreateIfb` sends `IFLA_TXQLEN` 0 from a zero
    /// `LinkAttrs`); `alias` sets `IFLA_IFALIAS` when given.
    pub fn add_ifb(&self, name: &str, mtu: u32, alias: Option<&str>) -> Result<Link> {
        let span = cni_types::step_span!("link.create", link.kind = "ifb", link.name = %name);
        cni_types::trace::in_step(span, || {
            let mut m = LinkMessage::default();
            m.header.flags = LinkFlags::Up;
            m.header.change_mask = LinkFlags::Up;
            m.attributes.push(LinkAttribute::IfName(name.to_owned()));
            m.attributes.push(LinkAttribute::Mtu(mtu));
            m.attributes.push(LinkAttribute::TxQueueLen(0));
            m.attributes
                .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Ifb)]));
            self.request(
                RouteNetlinkMessage::NewLink(m),
                NLM_F_CREATE | NLM_F_EXCL,
                || format!("add ifb {name}"),
            )?;
            let link = self.link_by_name(name)?;
            if let Some(alias) = alias {
                let mut m = LinkMessage::default();
                m.header.index = link.index;
                m.attributes.push(LinkAttribute::IfAlias(alias.to_owned()));
                self.request(RouteNetlinkMessage::SetLink(m), 0, || {
                    format!("set alias of {name}")
                })?;
            }
            Ok(link)
        })
    }

    /// The alias (`IFLA_IFALIAS`) of a link, if it has one.
    pub fn link_alias(&self, index: u32) -> Result<Option<String>> {
        Ok(self
            .link_attribute(index, |a| match a {
                LinkAttribute::IfAlias(s) => Some(s.clone()),
                _ => None,
            })?
            .filter(|s| !s.is_empty()))
    }

    /// The transmit queue length (`IFLA_TXQLEN`) of a link.
    pub fn link_txqlen(&self, index: u32) -> Result<u32> {
        Ok(self
            .link_attribute(index, |a| match a {
                LinkAttribute::TxQueueLen(q) => Some(*q),
                _ => None,
            })?
            .unwrap_or(0))
    }

    fn link_attribute<T>(
        &self,
        index: u32,
        pick: impl Fn(&LinkAttribute) -> Option<T>,
    ) -> Result<Option<T>> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        let r = self.request(RouteNetlinkMessage::GetLink(m), 0, || {
            format!("get link #{index}")
        })?;
        for msg in r {
            if let RouteNetlinkMessage::NewLink(m) = msg {
                return Ok(m.attributes.iter().find_map(&pick));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psched_clock_parses_like_go() {
        let c = PschedClock::parse("000003e8 00000040 000f4240 3b9aca00\n").unwrap();
        assert_eq!(c.tick_in_usec, 15.625);
        // A nanosecond clock resolution takes t2us from us2t.
        let c = PschedClock::parse("000003e8 00000040 3b9aca00 3b9aca00").unwrap();
        assert_eq!(c.tick_in_usec, 1000.0);
        assert_eq!(PschedClock::parse("1 2"), None);
        assert_eq!(PschedClock::parse("1 0 3 4"), None);
    }

    #[test]
    fn tbf_arithmetic_matches_the_reference() {
        // Figures from `tc -j qdisc show` after Go's bandwidth plugin with
        // ingressRate 8 Mbit/s and ingressBurst 80 kbit.
        let t = Tbf::from_rate_and_burst(8_000_000, 80_000, PschedClock::default());
        assert_eq!(t.rate, 1_000_000);
        // 10000 bytes at 1 MB/s = 10000 us = 156250 ticks.
        assert_eq!(t.buffer, 156_250);
        // 25 ms at 1 MB/s plus the burst.
        assert_eq!(t.limit, 25_000 + 10_000);
    }

    #[test]
    fn tbf_options_round_trip_with_rate64() {
        let t = Tbf {
            rate: 5 << 32,
            limit: 7,
            buffer: 9,
        };
        let opts = t.options();
        assert_eq!(opts.len(), 2);
        let mut nested = Vec::new();
        for o in &opts {
            let mut b = vec![0u8; netlink_packet_core::Emitable::buffer_len(o)];
            netlink_packet_core::Emitable::emit(o, &mut b);
            nested.extend(b);
        }
        assert_eq!(Tbf::parse(&nested), Some(t));
    }

    #[test]
    fn filter_message_carries_priority_protocol_and_actions() {
        let m = filter_message(
            5,
            INGRESS_QDISC_HANDLE,
            1,
            9,
            RedirectFilterKind::U32GoCompatible,
        );
        let f = filter_from_message(&m);
        assert_eq!(f.priority, 1);
        assert_eq!(f.protocol, ETH_P_ALL);
        assert_eq!(f.kind, "u32");
        assert_eq!(f.redirects, vec![9, 9]);
        let m = filter_message(5, INGRESS_QDISC_HANDLE, 1, 9, RedirectFilterKind::MatchAll);
        assert_eq!(filter_from_message(&m).redirects, vec![9]);
    }
}
