//! `nagless doctor FILE`: find Nagle and delayed-ACK stalls in a packet capture.

use anyhow::Context as _;

use crate::usage;

pub const DOCTOR_HELP: &str = "\
CAPTURE
  pcap or pcapng, from tcpdump, tshark or Wireshark; Ethernet, Linux cooked (tcpdump -i any),
  raw IP and BSD loopback; IPv4 and IPv6; headers-only captures (-s 128) are enough:
    tcpdump -i any -s 128 -w slow.pcap 'tcp port 8000'

WHAT IT LOOKS FOR
  delayed ACK  a pure ACK 30 ms or more (beyond the round trip) after the data it acknowledges
  stall        a small write held by Nagle until such an ACK: the sender wrote, waited 30 ms or
               more for the ACK of its previous small segment, and sent right after it came
  Patterns named: request split, header then body, tiny trailing frame.

EXIT STATUS
  0 analysed (whether or not stalls were found), 2 unreadable or damaged capture, bad arguments.";

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// The capture file.
    file: std::path::PathBuf,
    /// Print JSON (schema in docs/doctor-json.md) instead of the summary.
    #[arg(long)]
    json: bool,
    /// Only this flow: its number in the summary, or an address such as 127.0.0.1:8000.
    #[arg(long, value_name = "FLOW")]
    flow: Option<String>,
    /// Write an SVG timeline of the worst (or chosen) flow to FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

pub fn command(args: DoctorArgs) -> anyhow::Result<bool> {
    let bytes = std::fs::read(&args.file)
        .map_err(|e| usage(format!("cannot read {}: {e}", args.file.display())))?;
    let diagnosis = nagless_doctor::diagnose(&bytes)
        .map_err(|e| usage(format!("{}: {e}", args.file.display())))?;
    let mut flows = nagless_doctor::report::ranked(&diagnosis);
    if let Some(sel) = &args.flow {
        flows.retain(|f| match sel.parse::<usize>() {
            Ok(n) => f.index == n,
            Err(_) => f.sides.iter().any(|s| &s.addr == sel),
        });
        if flows.is_empty() {
            return Err(usage(format!(
                "no flow '{sel}' in {} ({} flow(s); give a number from the summary or an address like 127.0.0.1:8000)",
                args.file.display(),
                diagnosis.flows.len()
            )));
        }
    }
    if args.json {
        let doc = nagless_doctor::report::json(&diagnosis, &flows);
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", nagless_doctor::report::text(&diagnosis, &flows));
    }
    if let Some(path) = &args.svg {
        let Some(worst) = flows.first() else {
            return Err(usage("the capture has no TCP flow to draw"));
        };
        std::fs::write(path, nagless_doctor::report::svg(worst))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(true)
}
