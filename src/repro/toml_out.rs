//! A [`Scenario`] written as the scenario file format of docs/scenarios.md (the subset a
//! conversion produces: byte sizes, no `[sizes]`, no `[env]`, one `bug` variant). Every
//! string goes through TOML's own escaping.

use crate::scenario::{Expectation, Op, Scenario, SizeSpec};
use crate::units::{GIB, MIB};
use std::fmt::Write;

/// A TOML string; characters that hide or reorder text made visible first
/// ([`crate::term::is_hidden`]).
fn q(s: &str) -> String {
    toml::Value::String(crate::term::reveal_hidden(s)).to_string()
}

/// Bytes as the file writes them: `4GiB`, `448MiB`, or the exact number.
fn size(s: &SizeSpec) -> String {
    match *s {
        SizeSpec::Bytes(b) if b > 0 && b % GIB == 0 => q(&format!("{}GiB", b / GIB)),
        SizeSpec::Bytes(b) if b > 0 && b % MIB == 0 => q(&format!("{}MiB", b / MIB)),
        SizeSpec::Bytes(b) => q(&b.to_string()),
        SizeSpec::Fraction(f) | SizeSpec::FractionOfSmallest(f) => {
            q(&format!("{}%", (f * 1e4).round() / 1e2))
        }
        SizeSpec::Contexts(n) => q(&format!("{n}ctx")),
    }
}

/// The file. `header` lines become comments at the top.
pub fn to_toml(s: &Scenario, header: &[String]) -> String {
    let mut o = String::new();
    for h in header {
        let _ = writeln!(o, "# {}", h.replace(['\n', '\r'], " "));
    }
    let _ = writeln!(o, "id = {}", q(&s.id));
    let _ = writeln!(o, "title = {}", q(&s.title));
    let _ = writeln!(o, "description = {}", q(&s.description));
    let _ = writeln!(o, "source = {}", q(&s.source));
    let _ = writeln!(o, "devices = {}", s.devices);
    if let Some(r) = &s.recorded_on {
        let _ = writeln!(o, "recorded_on = {}", q(r));
    }
    if let Some(f) = &s.fingerprint {
        let _ = writeln!(o, "fingerprint = {}", q(f));
    }
    for n in &s.neighbours {
        let _ = write!(
            o,
            "\n[[neighbours]]\nlabel = {}\ndevice = {}\nsize = {}\n",
            q(&n.label),
            n.device,
            size(&n.size)
        );
        if let Some(f) = &n.from {
            let _ = writeln!(o, "from = {}", q(f));
        }
        if let Some(u) = &n.until {
            let _ = writeln!(o, "until = {}", q(u));
        }
    }
    for st in &s.steps {
        let _ = write!(
            o,
            "\n[[steps]]\nid = {}\nlabel = {}\nop = {}\n",
            q(&st.id),
            q(&st.label),
            q(st.op.name())
        );
        match &st.op {
            Op::Context { device } => {
                let _ = writeln!(o, "device = {device}");
            }
            Op::Alloc {
                tag,
                device,
                size: sz,
                fill,
                ..
            } => {
                let _ = writeln!(
                    o,
                    "tag = {}\ndevice = {device}\nsize = {}\nfill = {fill}",
                    q(tag),
                    size(sz)
                );
            }
            Op::Free { tag } => {
                let _ = writeln!(o, "tag = {}", q(tag));
            }
            Op::ClaimUtilization {
                tag,
                device,
                fraction,
            } => {
                let _ = writeln!(
                    o,
                    "tag = {}\ndevice = {device}\nfraction = {fraction}",
                    q(tag)
                );
            }
            Op::Pause { ms } => {
                let _ = writeln!(o, "duration = {}", q(&format!("{ms}ms")));
            }
            // A conversion makes none of these.
            Op::Fill { .. }
            | Op::EmptyCache { .. }
            | Op::ProcessGroup { .. }
            | Op::DestroyProcessGroup { .. } => {}
        }
    }
    for v in &s.variants {
        let _ = write!(
            o,
            "\n[[variants]]\nname = {}\ndescription = {}\n",
            q(&v.name),
            q(&v.description)
        );
        for e in &v.expect {
            o.push_str("[[variants.expect]]\n");
            expectation(&mut o, e);
        }
    }
    o
}

fn bounds(o: &mut String, min: &Option<SizeSpec>, max: &Option<SizeSpec>) {
    if let Some(m) = min {
        let _ = writeln!(o, "min = {}", size(m));
    }
    if let Some(m) = max {
        let _ = writeln!(o, "max = {}", size(m));
    }
}

fn expectation(o: &mut String, e: &Expectation) {
    match e {
        Expectation::Completes => o.push_str("check = \"completes\"\n"),
        Expectation::Oom {
            at_or_after,
            before,
        } => {
            o.push_str("check = \"oom\"\n");
            if let Some(a) = at_or_after {
                let _ = writeln!(o, "at_or_after = {}", q(a));
            }
            if let Some(b) = before {
                let _ = writeln!(o, "before = {}", q(b));
            }
        }
        Expectation::Peak { device, min, max } => {
            let _ = writeln!(o, "check = \"peak\"\ndevice = {device}");
            bounds(o, min, max);
        }
        Expectation::WorkerOnDevice { device, min, max } => {
            let _ = writeln!(o, "check = \"worker_on_device\"\ndevice = {device}");
            bounds(o, min, max);
        }
        Expectation::Residual {
            after,
            devices,
            min,
            max,
            ..
        } => {
            let _ = writeln!(o, "check = \"residual\"\nafter = {}", q(after));
            if !devices.is_empty() {
                let list: Vec<String> = devices.iter().map(u32::to_string).collect();
                let _ = writeln!(o, "devices = [{}]", list.join(", "));
            }
            bounds(o, min, max);
        }
        Expectation::Footprint { at, min, max } => {
            let _ = writeln!(o, "check = \"footprint\"\nat = {}", q(at));
            bounds(o, min, max);
        }
    }
}
