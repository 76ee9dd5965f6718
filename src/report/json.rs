//! JSON renderer: the source of truth, pretty-printed with a trailing newline. Arrays nested
//! directly in arrays (the `[t_ms, used]` samples of a timeline) are written on one line, so a
//! long timeline stays a few bytes per sample and one sample per line. Command lines pass
//! through the render-time redaction pass ([`super::text::sanitized`]) like every format.

use crate::model::Report;
use serde::Serialize;
use std::io::{self, Write};

pub fn render(report: &Report) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * 1024);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, ReportFormatter::default());
    // Serializing plain data structures into memory cannot fail; fall back to an empty object
    // defensively.
    if super::text::sanitized(report).serialize(&mut ser).is_err() {
        out = b"{}".to_vec();
    }
    out.push(b'\n');
    out
}

/// Two-space indentation like serde_json's pretty printer, except that containers inside an
/// array that is itself inside an array are compact (`[12.5, 4096]`).
#[derive(Default)]
struct ReportFormatter {
    /// Per open container: is it an array, is it compact, has it a value yet.
    stack: Vec<Level>,
}

#[derive(Clone, Copy)]
struct Level {
    array: bool,
    compact: bool,
    has_value: bool,
}

impl ReportFormatter {
    fn open<W: ?Sized + Write>(&mut self, w: &mut W, array: bool) -> io::Result<()> {
        let compact = match self.stack.last() {
            Some(parent) => parent.compact || (array && parent.array),
            None => false,
        };
        self.stack.push(Level {
            array,
            compact,
            has_value: false,
        });
        w.write_all(if array { b"[" } else { b"{" })
    }

    fn close<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        let level = self.stack.pop().unwrap_or(Level {
            array: false,
            compact: true,
            has_value: false,
        });
        if !level.compact && level.has_value {
            w.write_all(b"\n")?;
            self.indent(w)?;
        }
        w.write_all(if level.array { b"]" } else { b"}" })
    }

    fn item<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        let compact = self.stack.last().is_some_and(|l| l.compact);
        if compact {
            if !first {
                w.write_all(b", ")?;
            }
            return Ok(());
        }
        w.write_all(if first { b"\n" } else { b",\n" })?;
        self.indent(w)
    }

    fn indent<W: ?Sized + Write>(&self, w: &mut W) -> io::Result<()> {
        for _ in 0..self.stack.len() {
            w.write_all(b"  ")?;
        }
        Ok(())
    }

    fn mark_value(&mut self) {
        if let Some(l) = self.stack.last_mut() {
            l.has_value = true;
        }
    }
}

impl serde_json::ser::Formatter for ReportFormatter {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, true)
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w)
    }
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.item(w, first)
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.mark_value();
        Ok(())
    }
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, false)
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w)
    }
    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.item(w, first)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.mark_value();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceSeries, Timeline};

    #[test]
    fn samples_are_one_per_line_and_the_rest_is_pretty() {
        let tl = Timeline {
            devices: vec![DeviceSeries {
                device: 0,
                total: 8,
                samples: vec![(0.0, 1), (2.5, 4)],
            }],
            markers: vec![],
            processes: vec![],
            gaps: vec![],
        };
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, ReportFormatter::default());
        tl.serialize(&mut ser).unwrap();
        let text = String::from_utf8(out).unwrap();
        let expected = "{\n  \"devices\": [\n    {\n      \"device\": 0,\n      \"total\": 8,\n      \
                        \"samples\": [\n        [0.0, 1],\n        [2.5, 4]\n      ]\n    }\n  ],\n  \
                        \"markers\": []\n}";
        assert_eq!(text, expected);
        let back: Timeline = serde_json::from_str(&text).unwrap();
        assert_eq!(back, tl);
    }
}
