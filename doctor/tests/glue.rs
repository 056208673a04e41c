//! The doctor names what each of the lab's glue cases is (issue 54), on captures of them
//! (`doctor/tests/glue/`, made by its `make-glue.sh`: each case's program as shipped, on
//! loopback): a stream of events, a TLS 1.3 first answer behind the session tickets, a
//! request written in two pieces to a `TCP_NODELAY` server, a relay's hop, each with the
//! fix its shape needs.

use std::path::PathBuf;

use nagless_doctor::analysis::Pattern;
use nagless_doctor::{Diagnosis, FlowReport};

fn diagnose(name: &str) -> Diagnosis {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/glue")
        .join(name);
    let bytes = std::fs::read(path).unwrap();
    let opts = nagless_doctor::Options {
        top: 0,
        ..nagless_doctor::Options::default()
    };
    nagless_doctor::diagnose_reader(&bytes[..], opts, |_| {}).unwrap()
}

/// The flows with stalls, and every stall's pattern in them.
fn stalled(d: &Diagnosis) -> Vec<&FlowReport> {
    d.flows.iter().filter(|f| f.stall_count > 0).collect()
}

#[test]
fn each_glue_case_is_named_for_what_it_is() {
    let sse = diagnose("sse-stream.pcap");
    let f = stalled(&sse);
    assert_eq!(f.len(), 1, "one stream stalls");
    assert!(f[0]
        .stalls
        .iter()
        .any(|s| s.pattern == Pattern::EventStream));
    assert!(f[0].verdict[0].contains("streams small messages one by one"));
    assert!(f[0].verdict[1].contains("set TCP_NODELAY (each message"));

    let tls = diagnose("tls-first-request.pcap");
    let f = stalled(&tls);
    assert!(!f.is_empty());
    for flow in &f {
        assert_eq!(flow.stall_count, 1, "only the first answer of a connection");
        assert_eq!(flow.stalls[0].pattern, Pattern::TlsFirstAnswer);
        assert!(flow.verdict[0].contains("behind the TLS 1.3 session tickets"));
    }
    // The connections whose tickets were ACKed at once have none.
    assert!(tls.flows.len() > f.len());

    let split = diagnose("nodelay-server.pcap");
    let f = stalled(&split);
    assert_eq!(f.len(), 1);
    assert!(f[0]
        .stalls
        .iter()
        .all(|s| s.pattern == Pattern::RequestSplit && s.direction == "client->server"));

    let relay = diagnose("relay-hop.pcap");
    let f = stalled(&relay);
    assert_eq!(f.len(), 1, "the upstream hop alone stalls");
    let from = f[0].stalls[0].relayed_from.expect("the hop relayed");
    assert!(f[0]
        .stalls
        .iter()
        .all(|s| s.pattern == Pattern::RelayHop && s.relayed_from == Some(from)));
    // The flow it relays is the client's, to the relay: its server is the hop's sender.
    let source = relay.flows.iter().find(|g| g.index == from).unwrap();
    let hop_sender = f[0].stalls[0].sender.rsplit_once(':').unwrap().0;
    assert!(source.sides[1].addr.starts_with(hop_sender));
    assert_eq!(source.stall_count, 0);
    assert!(f[0].verdict[1].contains("the relay's socket of this hop"));
    assert!(
        f[0].verdict[0].contains(&format!("what reaches it on flow {from}")),
        "{:?}",
        f[0].verdict
    );
}
