//! The restricted pickle reader: plain data only (dicts, lists, tuples, sets, strings, bytes,
//! integers, floats, booleans, `None`), protocols 2 to 5, executing nothing. Every opcode
//! that names a global or calls a constructor (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`,
//! `INST`, `OBJ`, `NEWOBJ`, `NEWOBJ_EX`, `EXT1/2/4`, `PERSID`, `BINPERSID`, out-of-band
//! buffers) is refused with an error naming it and its byte offset.
//!
//! Bounded: the input's length is known up front and no length prefix may exceed what is
//! left of it; the MARK stack and the value stack have fixed depths; memo indexes must be
//! sequential (as Python's `Pickler` writes them); a budget caps the values built
//! ([`Limits::max_values`]). Values live in arenas ([`Doc`]) addressed by index, so a memo
//! reference is a copy of an index (no deep copy: the "billion laughs" shape costs what the
//! file costs), a cycle is harmless, and dropping a document never recurses.
//! Opcode numbers and meanings: CPython `Lib/pickletools.py` and `Lib/pickle.py`.

use std::io::Read;
use thiserror::Error;

pub use super::doc::*;

/// What may take the items appended to a list as they come, instead of the list (a typed
/// reader converting a long list of records as it is read, so the records' dicts are not
/// all held at once).
pub trait Appends {
    /// `items` are about to be appended to the list at arena index `list`; `under` is the
    /// value stack below that list (its top last). `true`: taken, the list keeps none of
    /// them; `false`: they are appended as usual.
    fn take(&mut self, doc: &mut Doc, list: u32, under: &[Packed], items: &[Packed]) -> bool;
}

/// Every item stays in its list.
pub struct KeepAll;

impl Appends for KeepAll {
    fn take(&mut self, _: &mut Doc, _: u32, _: &[Packed], _: &[Packed]) -> bool {
        false
    }
}

/// Bounds on what one pickle may make the reader do.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Containers open at once (the MARK stack) and values on the stack.
    pub max_marks: usize,
    pub max_stack: usize,
    /// Values built in all (list items, dict entries, strings, numbers): each costs 16 to 32
    /// bytes, so this caps the memory a crafted file can make the reader take.
    pub max_values: u64,
}

impl Limits {
    /// The limits for an input of `len` bytes: at most one value per two bytes of input
    /// (a real snapshot builds about one per five), and 16 containers open at once (a
    /// snapshot nests 7 deep).
    pub fn for_len(len: u64) -> Limits {
        Limits {
            max_marks: 64,
            max_stack: 4096,
            max_values: len / 2 + 1024,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum PickleError {
    #[error("byte {at}: the pickle {what} (`{name}`); vramdoc reads only plain data (dicts, lists, strings, numbers) and runs nothing from a pickle, so it refused the file: a PyTorch memory snapshot never contains one")]
    Forbidden {
        at: u64,
        what: &'static str,
        name: String,
    },
    #[error("byte 0: not a pickle: a PyTorch memory snapshot starts with the pickle protocol opcode 0x80, this file with {start} (a text file?)")]
    NotAPickle { start: String },
    #[error("byte {at}: unknown pickle opcode 0x{op:02x} (not a pickle of protocol 2 to 5, or a damaged one)")]
    UnknownOpcode { at: u64, op: u8 },
    #[error("byte {at}: the pickle ends in the middle of {what} (a truncated file?)")]
    Truncated { at: u64, what: &'static str },
    #[error("byte {at}: {what}")]
    Malformed { at: u64, what: String },
    #[error(
        "byte {at}: {what}; the file is refused as a precaution (see docs/explain.md \"Safety\")"
    )]
    Limit { at: u64, what: String },
    #[error("reading the pickle: {0}")]
    Io(String),
}

/// A reader that counts the bytes it has handed out, through its own buffer: the opcode
/// loop takes a byte or a few at a time, and going through `Read` for each was the largest
/// cost of reading a large snapshot (issue 34).
struct Input<R> {
    inner: R,
    pos: u64,
    len: u64,
    buf: Box<[u8]>,
    head: usize,
    end: usize,
}

/// The most [`Input`] buffers (the reader below it may buffer too: reads this large go
/// past a `BufReader` of the same capacity).
const INPUT_BUF: usize = 1 << 20;

impl<R: Read> Input<R> {
    fn new(inner: R, len: u64) -> Self {
        let cap = usize::try_from(len).map_or(INPUT_BUF, |l| l.clamp(16, INPUT_BUF));
        Input {
            inner,
            pos: 0,
            len,
            buf: vec![0u8; cap].into_boxed_slice(),
            head: 0,
            end: 0,
        }
    }

    #[inline]
    fn fill(&mut self, out: &mut [u8], what: &'static str) -> Result<(), PickleError> {
        let n = out.len();
        if self.end - self.head >= n {
            out.copy_from_slice(&self.buf[self.head..self.head + n]);
            self.head += n;
            self.pos += n as u64;
            return Ok(());
        }
        self.fill_slow(out, what)
    }

    /// [`Input::fill`] past the end of what is buffered: the rest of the buffer, then reads.
    #[cold]
    fn fill_slow(&mut self, out: &mut [u8], what: &'static str) -> Result<(), PickleError> {
        let at = self.pos;
        let n = out.len();
        let mut done = 0;
        loop {
            let k = (self.end - self.head).min(n - done);
            out[done..done + k].copy_from_slice(&self.buf[self.head..self.head + k]);
            self.head += k;
            done += k;
            if done == n {
                self.pos = at + n as u64;
                return Ok(());
            }
            self.head = 0;
            self.end = 0;
            let io = |e: std::io::Error| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    PickleError::Truncated { at, what }
                } else {
                    PickleError::Io(e.to_string())
                }
            };
            if n - done >= self.buf.len() {
                // Larger than the buffer: straight into `out`.
                self.inner.read_exact(&mut out[done..]).map_err(io)?;
                self.pos = at + n as u64;
                return Ok(());
            }
            match self.inner.read(&mut self.buf) {
                Ok(0) => return Err(PickleError::Truncated { at, what }),
                Ok(k) => self.end = k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
    }

    #[inline]
    fn byte(&mut self, what: &'static str) -> Result<u8, PickleError> {
        if self.head < self.end {
            let b = self.buf[self.head];
            self.head += 1;
            self.pos += 1;
            return Ok(b);
        }
        let mut b = [0u8; 1];
        self.fill_slow(&mut b, what)?;
        Ok(b[0])
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], PickleError> {
        let mut b = [0u8; N];
        self.fill(&mut b, what)?;
        Ok(b)
    }
    /// `n` bytes, refused before any allocation when more than the input has left.
    fn take(&mut self, n: u64, what: &'static str) -> Result<Vec<u8>, PickleError> {
        if n > self.len.saturating_sub(self.pos) {
            return Err(PickleError::Truncated { at: self.pos, what });
        }
        let n = n as usize;
        if self.end - self.head >= n {
            let v = self.buf[self.head..self.head + n].to_vec();
            self.head += n;
            self.pos += n as u64;
            return Ok(v);
        }
        let mut v = vec![0u8; n];
        self.fill_slow(&mut v, what)?;
        Ok(v)
    }
    /// A text line (the arguments of `GLOBAL`/`INST`), at most 256 bytes, for the error.
    fn line(&mut self) -> String {
        let mut out = Vec::new();
        while out.len() < 256 {
            match self.byte("a line") {
                Ok(b'\n') | Err(_) => break,
                Ok(b) => out.push(b),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

struct Parser<'s, R> {
    input: Input<R>,
    appends: &'s mut dyn Appends,
    limits: Limits,
    doc: Doc,
    stack: Vec<Packed>,
    marks: Vec<usize>,
    memo: Vec<Packed>,
    values: u64,
    op_at: u64,
}

/// Decode one pickle of `len` bytes from `reader`.
pub fn decode<R: Read>(reader: R, len: u64, limits: Limits) -> Result<Doc, PickleError> {
    decode_with(reader, len, limits, &mut KeepAll)
}

/// Decode one pickle of `len` bytes from `reader`, offering every append to `appends`.
pub fn decode_with<R: Read>(
    reader: R,
    len: u64,
    limits: Limits,
    appends: &mut dyn Appends,
) -> Result<Doc, PickleError> {
    let mut p = Parser {
        input: Input::new(reader, len),
        appends,
        limits,
        doc: Doc::default(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Vec::new(),
        values: 0,
        op_at: 0,
    };
    let root = p.run()?;
    p.doc.root = Some(p.doc.unpack(root));
    Ok(p.doc)
}

/// Decode a pickle held in memory.
pub fn decode_slice(data: &[u8]) -> Result<Doc, PickleError> {
    decode(data, data.len() as u64, Limits::for_len(data.len() as u64))
}

fn forbidden(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "names a global",
        0x93 => "names a global",
        b'R' => "calls a callable (REDUCE)",
        b'b' => "sets an object's state (BUILD)",
        b'i' => "builds an instance of a class (INST)",
        b'o' => "builds an instance of a class (OBJ)",
        0x81 => "builds an instance of a class (NEWOBJ)",
        0x92 => "builds an instance of a class (NEWOBJ_EX)",
        0x82..=0x84 => "names a global through the extension registry (EXT)",
        b'P' | b'Q' => "refers to a persistent object (PERSID)",
        0x97 | 0x98 => "refers to an out-of-band buffer",
        _ => return None,
    })
}

impl<R: Read> Parser<'_, R> {
    fn err(&self, what: impl Into<String>) -> PickleError {
        PickleError::Malformed {
            at: self.op_at,
            what: what.into(),
        }
    }

    fn count(&mut self, n: u64) -> Result<(), PickleError> {
        self.values += n;
        if self.values > self.limits.max_values {
            return Err(PickleError::Limit {
                at: self.op_at,
                what: format!(
                    "more than {} values for a file of this size",
                    self.limits.max_values
                ),
            });
        }
        Ok(())
    }

    fn push(&mut self, v: Value) -> Result<(), PickleError> {
        let p = self.doc.pack(v);
        self.push_p(p)
    }

    fn push_p(&mut self, v: Packed) -> Result<(), PickleError> {
        if self.stack.len() >= self.limits.max_stack {
            return Err(PickleError::Limit {
                at: self.op_at,
                what: format!("more than {} values on the stack", self.limits.max_stack),
            });
        }
        self.count(1)?;
        self.stack.push(v);
        Ok(())
    }

    fn pop(&mut self) -> Result<Packed, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.err("stack underflow"));
        }
        self.stack.pop().ok_or_else(|| self.err("stack underflow"))
    }

    fn pop_mark(&mut self) -> Result<Vec<Packed>, PickleError> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| self.err("no MARK to pop to"))?;
        Ok(self.stack.split_off(m))
    }

    fn new_str(&mut self, bytes: Vec<u8>) -> Result<Value, PickleError> {
        let s = String::from_utf8(bytes).map_err(|_| self.err("a string is not UTF-8"))?;
        let i = self.doc.strs.len() as u32;
        self.doc.strs.push(s.into_boxed_str());
        Ok(Value::Str(i))
    }

    fn new_bytes(&mut self, bytes: Vec<u8>) -> Value {
        let i = self.doc.bytes.len() as u32;
        self.doc.bytes.push(bytes.into_boxed_slice());
        Value::Bytes(i)
    }

    fn new_seq(&mut self, items: Vec<Packed>, tuple: bool) -> Value {
        let i = self.doc.seqs.len() as u32;
        self.doc.seqs.push(Seq::Own(items));
        if tuple {
            Value::Tuple(i)
        } else {
            Value::List(i)
        }
    }

    fn new_map(&mut self, items: Vec<Packed>) -> Result<Value, PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.err("a dict with an odd number of items"));
        }
        let pairs = items.chunks_exact(2).map(|c| (c[0], c[1])).collect();
        let i = self.doc.maps.len() as u32;
        self.doc.maps.push(pairs);
        Ok(Value::Dict(i))
    }

    fn top(&self) -> Result<Packed, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.err("stack underflow"));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.err("stack underflow"))
    }

    fn extend_seq(&mut self, target: Packed, items: Vec<Packed>) -> Result<(), PickleError> {
        match self.doc.unpack(target) {
            Value::List(i) => {
                // The target is the stack's top (APPEND, APPENDS); below it, its context.
                let under = &self.stack[..self.stack.len().saturating_sub(1)];
                if self.appends.take(&mut self.doc, i, under, &items) {
                    return Ok(());
                }
                let seq = self.doc.own(i).ok_or_else(|| PickleError::Malformed {
                    at: 0,
                    what: "a list out of range".into(),
                })?;
                // Exact for a list filled in one batch (most); amortized for long ones.
                if seq.is_empty() {
                    seq.reserve_exact(items.len());
                } else {
                    seq.reserve(items.len());
                }
                seq.extend(items);
                Ok(())
            }
            _ => Err(self.err("APPEND to something that is not a list or set")),
        }
    }

    fn extend_map(&mut self, target: Packed, items: Vec<Packed>) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.err("SETITEMS with an odd number of items"));
        }
        match self.doc.unpack(target) {
            Value::Dict(i) => {
                self.doc.written(i);
                let map = &mut self.doc.maps[i as usize];
                if map.is_empty() {
                    map.reserve_exact(items.len() / 2);
                } else {
                    map.reserve(items.len() / 2);
                }
                map.extend(items.chunks_exact(2).map(|c| (c[0], c[1])));
                Ok(())
            }
            _ => Err(self.err("SETITEM on something that is not a dict")),
        }
    }

    fn memo_put(&mut self, id: u64) -> Result<(), PickleError> {
        let v = self.top()?;
        let len = self.memo.len() as u64;
        if id == len {
            self.count(1)?;
            self.memo.push(v);
        } else if id < len {
            self.memo[id as usize] = v;
        } else {
            return Err(self.err(format!(
                "memo index {id} out of order (next is {len}; Python writes them in order)"
            )));
        }
        Ok(())
    }

    fn memo_get(&mut self, id: u64) -> Result<(), PickleError> {
        let v = *self
            .memo
            .get(id as usize)
            .ok_or_else(|| self.err(format!("memo index {id} was never stored")))?;
        self.push_p(v)
    }

    fn long(&mut self, n: u64) -> Result<Value, PickleError> {
        let b = self.input.take(n, "an integer")?;
        if b.len() > 8 {
            // Python writes the shortest two's-complement form: more than 8 bytes is > 64 bits.
            return Err(self.err("an integer wider than 64 bits"));
        }
        let neg = b.last().is_some_and(|x| x & 0x80 != 0);
        let mut buf = if neg { [0xffu8; 8] } else { [0u8; 8] };
        buf[..b.len()].copy_from_slice(&b);
        Ok(Value::Int(i64::from_le_bytes(buf)))
    }

    fn run(&mut self) -> Result<Packed, PickleError> {
        // Protocols 2 to 5 begin with PROTO; anything else is not one (issue 39 item 7).
        let first = self.input.byte("an opcode")?;
        if first != 0x80 {
            let mut head = vec![first];
            while head.len() < 24 {
                match self.input.byte("") {
                    Ok(b'\n') | Err(_) => break,
                    Ok(b) => head.push(b),
                }
            }
            let text = String::from_utf8_lossy(&head);
            let start = if text.chars().all(|c| !c.is_control() && c != '\u{fffd}') {
                format!("`{}`", crate::term::one_line(&text))
            } else {
                format!("byte 0x{first:02x}")
            };
            return Err(PickleError::NotAPickle { start });
        }
        let v = self.input.byte("the protocol")?;
        if !(2..=5).contains(&v) {
            return Err(self.err(format!(
                "pickle protocol {v} (vramdoc reads protocols 2 to 5)"
            )));
        }
        loop {
            self.op_at = self.input.pos;
            let op = self.input.byte("an opcode")?;
            if let Some(what) = forbidden(op) {
                let name = match op {
                    b'c' | b'i' => {
                        let module = self.input.line();
                        let name = self.input.line();
                        format!("{}.{}", module.trim(), name.trim())
                    }
                    0x93 => {
                        let n = self.stack.len();
                        let s = |v: Option<&Packed>| {
                            v.and_then(|v| self.doc.str_of(self.doc.unpack(*v)))
                                .unwrap_or("?")
                                .to_string()
                        };
                        let module = s(n.checked_sub(2).and_then(|i| self.stack.get(i)));
                        let name = s(n.checked_sub(1).and_then(|i| self.stack.get(i)));
                        format!("{module}.{name}")
                    }
                    _ => format!("opcode 0x{op:02x}"),
                };
                let name: String = crate::term::one_line(&name).chars().take(120).collect();
                return Err(PickleError::Forbidden {
                    at: self.op_at,
                    what,
                    name,
                });
            }
            match op {
                0x80 => {
                    let v = self.input.byte("the protocol")?;
                    if !(2..=5).contains(&v) {
                        return Err(self.err(format!(
                            "pickle protocol {v} (vramdoc reads protocols 2 to 5)"
                        )));
                    }
                }
                0x95 => {
                    self.input.array::<8>("a frame length")?;
                }
                b'.' => {
                    let v = self.pop()?;
                    if !self.marks.is_empty() {
                        return Err(self.err("STOP inside an open MARK"));
                    }
                    return Ok(v);
                }
                b'(' => {
                    if self.marks.len() >= self.limits.max_marks {
                        return Err(PickleError::Limit {
                            at: self.op_at,
                            what: format!("more than {} nested MARKs", self.limits.max_marks),
                        });
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?;
                    self.push_p(v)?;
                }
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'J' => {
                    let b = self.input.array::<4>("an integer")?;
                    self.push(Value::Int(i32::from_le_bytes(b) as i64))?;
                }
                b'K' => {
                    let b = self.input.byte("an integer")?;
                    self.push(Value::Int(b as i64))?;
                }
                b'M' => {
                    let b = self.input.array::<2>("an integer")?;
                    self.push(Value::Int(u16::from_le_bytes(b) as i64))?;
                }
                0x8a => {
                    let n = self.input.byte("an integer's length")? as u64;
                    let v = self.long(n)?;
                    self.push(v)?;
                }
                0x8b => {
                    let n = i32::from_le_bytes(self.input.array::<4>("an integer's length")?);
                    if n < 0 {
                        return Err(self.err("a negative length"));
                    }
                    let v = self.long(n as u64)?;
                    self.push(v)?;
                }
                b'G' => {
                    let b = self.input.array::<8>("a float")?;
                    self.push(Value::Float(f64::from_be_bytes(b)))?;
                }
                0x8c | b'X' | 0x8d | b'U' | b'T' => {
                    let n = match op {
                        0x8c | b'U' => self.input.byte("a string's length")? as u64,
                        b'X' => {
                            u32::from_le_bytes(self.input.array::<4>("a string's length")?) as u64
                        }
                        b'T' => {
                            let n = i32::from_le_bytes(self.input.array::<4>("a string's length")?);
                            u64::try_from(n).map_err(|_| self.err("a negative length"))?
                        }
                        _ => u64::from_le_bytes(self.input.array::<8>("a string's length")?),
                    };
                    let b = self.input.take(n, "a string")?;
                    let v = self.new_str(b)?;
                    self.push(v)?;
                }
                b'C' | b'B' | 0x8e | 0x96 => {
                    let n = match op {
                        b'C' => self.input.byte("a bytes length")? as u64,
                        b'B' => u32::from_le_bytes(self.input.array::<4>("a bytes length")?) as u64,
                        _ => u64::from_le_bytes(self.input.array::<8>("a bytes length")?),
                    };
                    let b = self.input.take(n, "bytes")?;
                    let v = self.new_bytes(b);
                    self.push(v)?;
                }
                b']' | 0x8f => {
                    let v = self.new_seq(Vec::new(), false);
                    self.push(v)?;
                }
                b')' => {
                    let v = self.new_seq(Vec::new(), true);
                    self.push(v)?;
                }
                b'}' => {
                    let v = self.new_map(Vec::new())?;
                    self.push(v)?;
                }
                b'l' | b't' | 0x91 => {
                    let items = self.pop_mark()?;
                    let v = self.new_seq(items, op == b't');
                    self.push(v)?;
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return Err(self.err("stack underflow"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = self.new_seq(items, true);
                    self.push(v)?;
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    let v = self.new_map(items)?;
                    self.push(v)?;
                }
                b'a' => {
                    let item = self.pop()?;
                    let target = self.top()?;
                    self.extend_seq(target, vec![item])?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    let target = self.top()?;
                    self.extend_seq(target, items)?;
                }
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    let target = self.top()?;
                    self.extend_map(target, vec![key, value])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let target = self.top()?;
                    self.extend_map(target, items)?;
                }
                b'q' => {
                    let id = self.input.byte("a memo index")? as u64;
                    self.memo_put(id)?;
                }
                b'r' => {
                    let id = u32::from_le_bytes(self.input.array::<4>("a memo index")?) as u64;
                    self.memo_put(id)?;
                }
                0x94 => {
                    let id = self.memo.len() as u64;
                    self.memo_put(id)?;
                }
                b'h' => {
                    let id = self.input.byte("a memo index")? as u64;
                    self.memo_get(id)?;
                }
                b'j' => {
                    let id = u32::from_le_bytes(self.input.array::<4>("a memo index")?) as u64;
                    self.memo_get(id)?;
                }
                other => {
                    return Err(PickleError::UnknownOpcode {
                        at: self.op_at,
                        op: other,
                    })
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "pickle_tests.rs"]
mod tests;
