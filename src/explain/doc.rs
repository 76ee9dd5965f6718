//! The document [`super::pickle`] decodes: values packed in 8 bytes, and the arenas a
//! document's containers and strings live in, addressed by index (a memo reference is a copy
//! of an index; lists of equal content may share one copy).

use std::collections::HashMap;

/// One decoded value. Containers and strings are indexes into the [`Doc`]'s arenas.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(u32),
    Bytes(u32),
    /// A list or a set (`seqs`).
    List(u32),
    /// A tuple (`seqs`).
    Tuple(u32),
    Dict(u32),
}

/// A [`Value`] packed in 8 bytes as the arenas store it: a 3-bit tag and a 61-bit payload
/// (integers that do not fit, and floats, go to a side table). Snapshots are mostly
/// containers of small integers and references, so this halves the reader's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Packed(u64);

const T_ATOM: u64 = 0;
const T_INT: u64 = 1;
const T_STR: u64 = 2;
const T_BYTES: u64 = 3;
const T_LIST: u64 = 4;
const T_TUPLE: u64 = 5;
const T_DICT: u64 = 6;
const T_WIDE: u64 = 7;

/// A number that does not fit a [`Packed`] payload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Wide {
    Int(i64),
    Float(f64),
}

/// Entries of a dict beyond which [`Doc::get`] remembers what it found (a snapshot's dicts
/// hold at most a dozen keys; a crafted one may hold millions and be referenced as often).
const SCAN_LIMIT: usize = 16;

/// What [`Doc::get`] found in one large dict: per key looked up, the value (if any).
type Found = Vec<(&'static str, Option<Packed>)>;

/// The items of one list, set or tuple: its own, or a copy shared by every list of the same
/// content ([`Doc::share`]; written to again, it gets its own).
#[derive(Debug)]
pub(super) enum Seq {
    Own(Vec<Packed>),
    Shared(u32),
}

impl Default for Seq {
    fn default() -> Self {
        Seq::Own(Vec::new())
    }
}

/// A decoded pickle: the root value and the arenas its containers and strings live in.
#[derive(Debug, Default)]
pub struct Doc {
    pub root: Option<Value>,
    pub(super) strs: Vec<Box<str>>,
    pub(super) bytes: Vec<Box<[u8]>>,
    pub(super) seqs: Vec<Seq>,
    /// Contents of lists made [`Seq::Shared`] by [`Doc::share`], each once, and by content.
    shared: Vec<Box<[Packed]>>,
    by_content: HashMap<Box<[Packed]>, u32, foldhash::fast::RandomState>,
    pub(super) maps: Vec<Vec<(Packed, Packed)>>,
    pub(super) wide: Vec<Wide>,
    /// What [`Doc::get`] found in dicts of more than [`SCAN_LIMIT`] entries, per dict and
    /// key: each such dict is scanned once per key however often it is looked up, so the
    /// time to read a file stays linear in it (issue 39 item 2).
    found: std::cell::RefCell<HashMap<u32, Found>>,
    /// Dict entries [`Doc::get`] has compared (the measure of its work the tests bound).
    scanned: std::cell::Cell<u64>,
    /// Dicts converted and released while the pickle was read ([`Doc::release`]), one bit
    /// each.
    released: Vec<u64>,
    /// A released dict was written to afterwards: what was converted is not what the file
    /// leaves in it.
    rewritten: bool,
}

impl Doc {
    pub(super) fn pack(&mut self, v: Value) -> Packed {
        let tagged = |tag: u64, i: u32| Packed(((i as u64) << 3) | tag);
        match v {
            Value::None => Packed(T_ATOM),
            Value::Bool(b) => Packed(((1 + b as u64) << 3) | T_ATOM),
            Value::Int(i) if (i << 3) >> 3 == i => Packed(((i << 3) as u64) | T_INT),
            Value::Int(i) => {
                self.wide.push(Wide::Int(i));
                tagged(T_WIDE, (self.wide.len() - 1) as u32)
            }
            Value::Float(f) => {
                self.wide.push(Wide::Float(f));
                tagged(T_WIDE, (self.wide.len() - 1) as u32)
            }
            Value::Str(i) => tagged(T_STR, i),
            Value::Bytes(i) => tagged(T_BYTES, i),
            Value::List(i) => tagged(T_LIST, i),
            Value::Tuple(i) => tagged(T_TUPLE, i),
            Value::Dict(i) => tagged(T_DICT, i),
        }
    }

    /// The value a packed one stands for.
    pub fn unpack(&self, p: Packed) -> Value {
        let idx = (p.0 >> 3) as u32;
        match p.0 & 7 {
            T_ATOM => match p.0 >> 3 {
                1 => Value::Bool(false),
                2 => Value::Bool(true),
                _ => Value::None,
            },
            T_INT => Value::Int((p.0 as i64) >> 3),
            T_STR => Value::Str(idx),
            T_BYTES => Value::Bytes(idx),
            T_LIST => Value::List(idx),
            T_TUPLE => Value::Tuple(idx),
            T_DICT => Value::Dict(idx),
            _ => match self.wide.get(idx as usize) {
                Some(Wide::Int(i)) => Value::Int(*i),
                Some(Wide::Float(f)) => Value::Float(*f),
                None => Value::None,
            },
        }
    }

    pub fn str_of(&self, v: Value) -> Option<&str> {
        match v {
            Value::Str(i) => self.strs.get(i as usize).map(|s| &**s),
            _ => None,
        }
    }

    pub fn bytes_of(&self, v: Value) -> Option<&[u8]> {
        match v {
            Value::Bytes(i) => self.bytes.get(i as usize).map(|s| &**s),
            _ => None,
        }
    }

    /// The items of a list, set or tuple.
    pub fn seq_of(&self, v: Value) -> Option<impl ExactSizeIterator<Item = Value> + '_> {
        match v {
            Value::List(_) | Value::Tuple(_) => self
                .packed_seq(v)
                .map(|s| s.iter().map(|p| self.unpack(*p))),
            _ => None,
        }
    }

    /// The entries of a dict, in pickle order.
    pub fn map_of(&self, v: Value) -> Option<impl ExactSizeIterator<Item = (Value, Value)> + '_> {
        match v {
            Value::Dict(i) => self
                .maps
                .get(i as usize)
                .map(|m| m.iter().map(|(k, v)| (self.unpack(*k), self.unpack(*v)))),
            _ => None,
        }
    }

    /// The value under a string key of a dict (the last one, as Python keeps it). Constant
    /// time per dict and key after the first look into a large dict.
    pub fn get(&self, dict: Value, key: &'static str) -> Option<Value> {
        let Value::Dict(i) = dict else {
            return None;
        };
        let map = self.maps.get(i as usize)?;
        let scan = || {
            self.scanned.set(self.scanned.get() + map.len() as u64);
            map.iter()
                .rev()
                .find(|(k, _)| self.str_of(self.unpack(*k)) == Some(key))
                .map(|(_, v)| *v)
        };
        if map.len() <= SCAN_LIMIT {
            return scan().map(|v| self.unpack(v));
        }
        let mut found = self.found.borrow_mut();
        let keys = found.entry(i).or_default();
        let v = match keys.iter().find(|(k, _)| *k == key) {
            Some((_, v)) => *v,
            None => {
                let v = scan();
                keys.push((key, v));
                v
            }
        };
        v.map(|v| self.unpack(v))
    }

    /// The entries of a dict of at most [`SCAN_LIMIT`] entries, counted as scanned: for a
    /// reader that looks up several keys in one pass (the last of a key counts, as in
    /// [`Doc::get`]). `None` for a larger dict (look it up with [`Doc::get`]) or not a dict.
    pub fn small_map(&self, v: Value) -> Option<&[(Packed, Packed)]> {
        let Value::Dict(i) = v else {
            return None;
        };
        let map = self.maps.get(i as usize)?;
        if map.len() > SCAN_LIMIT {
            return None;
        }
        self.scanned.set(self.scanned.get() + map.len() as u64);
        Some(map)
    }

    /// Dict entries looked at by [`Doc::get`] so far (at most every entry of a dict per key
    /// looked up in it).
    pub fn entries_scanned(&self) -> u64 {
        self.scanned.get()
    }

    /// Dicts in the document (the budget of what a typed reading may build from it).
    pub fn dicts(&self) -> usize {
        self.maps.len()
    }

    /// The items of a list, set or tuple, packed as the arena holds them.
    pub fn packed_seq(&self, v: Value) -> Option<&[Packed]> {
        match v {
            Value::List(i) | Value::Tuple(i) => match self.seqs.get(i as usize)? {
                Seq::Own(s) => Some(&s[..]),
                Seq::Shared(k) => self.shared.get(*k as usize).map(|s| &s[..]),
            },
            _ => None,
        }
    }

    /// Make a list hold the one shared copy of its content (kept once however many lists
    /// hold the same items: PyTorch's stacks repeat); which copy, or `None` if `v` is not a
    /// list. What the list reads as does not change.
    pub fn share(&mut self, v: Value) -> Option<u32> {
        let (Value::List(i) | Value::Tuple(i)) = v else {
            return None;
        };
        let slot = self.seqs.get_mut(i as usize)?;
        let items = match slot {
            Seq::Shared(k) => return Some(*k),
            Seq::Own(items) => std::mem::take(items),
        };
        let k = match self.by_content.get(&items[..]) {
            Some(k) => *k,
            None => {
                let k = self.shared.len() as u32;
                let items: Box<[Packed]> = items.into();
                self.shared.push(items.clone());
                self.by_content.insert(items, k);
                k
            }
        };
        self.seqs[i as usize] = Seq::Shared(k);
        Some(k)
    }

    /// The shared copy a list holds ([`Doc::share`]), unless it was written to since.
    pub fn shared_id(&self, v: Value) -> Option<u32> {
        match v {
            Value::List(i) | Value::Tuple(i) => match self.seqs.get(i as usize)? {
                Seq::Shared(k) => Some(*k),
                Seq::Own(_) => None,
            },
            _ => None,
        }
    }

    /// The items of shared copy `k` ([`Doc::share`]).
    pub fn shared_items(&self, k: u32) -> &[Packed] {
        self.shared.get(k as usize).map_or(&[], |s| &s[..])
    }

    /// Move a list's items out of the arena (it is left empty).
    pub fn take_seq(&mut self, v: Value) -> Option<Vec<Packed>> {
        match v {
            Value::List(i) | Value::Tuple(i) => {
                let own = self.own(i)?;
                Some(std::mem::take(own))
            }
            _ => None,
        }
    }

    /// Release a container's items (it reads as empty afterwards).
    pub fn free(&mut self, v: Value) {
        match v {
            Value::List(i) | Value::Tuple(i) => {
                if let Some(s) = self.seqs.get_mut(i as usize) {
                    *s = Seq::default();
                }
            }
            Value::Dict(i) => {
                if let Some(m) = self.maps.get_mut(i as usize) {
                    *m = Vec::new();
                }
                self.found.get_mut().remove(&i);
            }
            _ => {}
        }
    }

    /// Release a dict converted while the pickle is read ([`Doc::free`]), remembering it:
    /// a later write to it makes [`Doc::rewritten`] true.
    pub fn release(&mut self, v: Value) {
        if let Value::Dict(i) = v {
            let (word, bit) = (i as usize / 64, i % 64);
            if self.released.len() <= word {
                self.released.resize(word + 1, 0);
            }
            self.released[word] |= 1 << bit;
        }
        self.free(v);
    }

    /// Note a write to dict `i` (while decoding).
    pub(super) fn written(&mut self, i: u32) {
        let (word, bit) = (i as usize / 64, i % 64);
        if self.released.get(word).is_some_and(|w| w & (1 << bit) != 0) {
            self.rewritten = true;
        }
    }

    /// Whether the file wrote to a dict after it was released ([`Doc::release`]): a reader
    /// that converted it as it came must read the file whole instead (Python's pickler never
    /// does so; a hand-made or damaged file may).
    pub fn rewritten(&self) -> bool {
        self.rewritten
    }

    /// A list's own items (a shared one first gets its own copy).
    pub(super) fn own(&mut self, i: u32) -> Option<&mut Vec<Packed>> {
        let slot = self.seqs.get_mut(i as usize)?;
        if let Seq::Shared(k) = slot {
            let copy = self
                .shared
                .get(*k as usize)
                .map_or(Vec::new(), |s| s.to_vec());
            *slot = Seq::Own(copy);
        }
        match slot {
            Seq::Own(items) => Some(items),
            Seq::Shared(_) => None,
        }
    }

    /// Containers and strings held (for the memory report of the bench).
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.seqs.len(), self.maps.len(), self.strs.len())
    }
}
