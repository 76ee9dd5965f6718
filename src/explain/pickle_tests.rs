//! Tests of the restricted pickle reader: refusals, plain data, bounds.

use super::*;

#[test]
fn global_is_refused_with_its_name() {
    // pickle.dumps of a REDUCE on os.system, protocol 2 (`cos\nsystem\n` ...).
    let p = b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03.";
    let e = decode_slice(p).unwrap_err();
    assert!(
        matches!(&e, PickleError::Forbidden { at: 2, name, .. } if name == "os.system"),
        "{e}"
    );
    assert!(e.to_string().contains("os.system"), "{e}");
}

#[test]
fn stack_global_is_refused_with_its_name() {
    let p = b"\x80\x04\x8c\x05posix\x94\x8c\x06system\x94\x93\x94.";
    let e = decode_slice(p).unwrap_err();
    assert!(e.to_string().contains("posix.system"), "{e}");
}

#[test]
fn plain_data_round_trips() {
    // pickle.dumps({'a': [1, -2, 300, 2**40, 1.5, None, True], 'b': (b'x', 'y')}, 4)
    let p = b"\x80\x04\x95;\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffM,\x01\x8a\x06\x00\x00\x00\x00\x00\x01G?\xf8\x00\x00\x00\x00\x00\x00N\x88e\x8c\x01b\x94C\x01x\x94\x8c\x01y\x94\x86\x94u.";
    let d = decode_slice(p).unwrap();
    let root = d.root.unwrap();
    let a: Vec<Value> = d.seq_of(d.get(root, "a").unwrap()).unwrap().collect();
    assert_eq!(
        a,
        [
            Value::Int(1),
            Value::Int(-2),
            Value::Int(300),
            Value::Int(1 << 40),
            Value::Float(1.5),
            Value::None,
            Value::Bool(true)
        ]
    );
    let b: Vec<Value> = d.seq_of(d.get(root, "b").unwrap()).unwrap().collect();
    assert_eq!(d.str_of(b[1]), Some("y"));
    assert_eq!(d.bytes_of(b[0]), Some(&b"x"[..]));
}

#[test]
fn huge_length_prefix_is_refused_before_allocating() {
    let p = b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f";
    let e = decode_slice(p).unwrap_err();
    assert!(matches!(e, PickleError::Truncated { at: 11, .. }), "{e}");
}

#[test]
fn memo_references_share_instead_of_copying() {
    // [L, L, L, ...] where L is one memoized list: 16 bytes per reference, no deep copy.
    let mut p = b"\x80\x04]\x94(K\x01K\x02e]\x94(".to_vec();
    for _ in 0..1000 {
        p.extend_from_slice(b"h\x00");
    }
    p.extend_from_slice(b"e.");
    let d = decode_slice(&p).unwrap();
    assert_eq!(d.counts().0, 2);
    assert_eq!(d.seq_of(d.root.unwrap()).unwrap().len(), 1000);
}

#[test]
fn deep_nesting_and_cycles_are_harmless() {
    // A list appended to itself, then a chain of 100k lists through the memo.
    let mut p = b"\x80\x04]\x94h\x00a".to_vec();
    for i in 1..100_000u32 {
        p.extend_from_slice(b"]\x940j");
        p.extend_from_slice(&(i - 1).to_le_bytes());
        p.extend_from_slice(b"j");
        p.extend_from_slice(&i.to_le_bytes());
        p.extend_from_slice(b"a0");
    }
    p.extend_from_slice(b".");
    let d = decode_slice(&p).unwrap();
    drop(d);
}

#[test]
fn value_budget_caps_memory() {
    let mut p = b"\x80\x04]\x94(".to_vec();
    p.extend(std::iter::repeat_n(b'N', 10_000));
    p.extend_from_slice(b"e.");
    let limits = Limits {
        max_values: 1000,
        ..Limits::for_len(p.len() as u64)
    };
    let e = decode(&p[..], p.len() as u64, limits).unwrap_err();
    assert!(matches!(e, PickleError::Limit { .. }), "{e}");
}

/// Issue 39 item 2: one dict of N keys referenced N times, each reference looked up: the
/// lookups scanned N × N entries (a 180 KB file took 15 s). Each dict is scanned once per key.
#[test]
fn lookups_in_a_large_shared_dict_scan_it_once_per_key() {
    const N: usize = 3000;
    // Python's pickler writes SETITEMS and APPENDS in batches of 1000.
    let mut p = b"\x80\x04}\x94".to_vec();
    for i in 0..N {
        if i % 1000 == 0 {
            p.extend_from_slice(if i == 0 { b"(" } else { b"u(" });
        }
        let k = format!("k{i}");
        p.push(0x8c);
        p.push(k.len() as u8);
        p.extend_from_slice(k.as_bytes());
        p.extend_from_slice(b"K\x01");
    }
    p.extend_from_slice(b"\x8c\x04sizeK\x07u]");
    for i in 0..N {
        if i % 1000 == 0 {
            p.extend_from_slice(if i == 0 { b"(" } else { b"e(" });
        }
        p.extend_from_slice(b"h\x00");
    }
    p.extend_from_slice(b"e.");
    let d = decode_slice(&p).unwrap();
    let refs: Vec<Value> = d.seq_of(d.root.unwrap()).unwrap().collect();
    assert_eq!(refs.len(), N);
    for r in &refs {
        assert_eq!(d.get(*r, "size"), Some(Value::Int(7)));
        assert_eq!(d.get(*r, "state"), None);
    }
    // Two keys, one scan each of N + 1 entries (the old reader: 2 × N × (N + 1)).
    assert!(
        d.entries_scanned() <= 2 * (N as u64 + 1),
        "{}",
        d.entries_scanned()
    );
    // Small dicts are scanned as before, and the last of a repeated key wins.
    let d = decode_slice(b"\x80\x04}\x94(\x8c\x01aK\x01\x8c\x01aK\x02u.").unwrap();
    assert_eq!(d.get(d.root.unwrap(), "a"), Some(Value::Int(2)));
}

/// Issue 39 item 7: a text file was refused as a pickle that "builds an instance of a class
/// (INST)", a security alert for what is not a pickle at all.
#[test]
fn a_text_file_is_not_a_pickle() {
    let e = decode_slice(b"id = \"notes\"\nname = 1\n").unwrap_err();
    assert!(matches!(e, PickleError::NotAPickle { .. }), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("not a pickle") && m.contains("`id = \"notes\"`"),
        "{m}"
    );
    assert!(!m.contains("INST"), "{m}");
    let e = decode_slice(b"\x00\x01\x02").unwrap_err().to_string();
    assert!(e.contains("byte 0x00"), "{e}");
    // Protocol 0 or 1 pickles have no PROTO opcode: refused the same way.
    assert!(matches!(
        decode_slice(b"(lp0\n."),
        Err(PickleError::NotAPickle { .. })
    ));
}

/// A reader that hands out at most 7 bytes per read (a pipe, a slow disk).
struct Trickle<'a>(&'a [u8]);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(7).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn values_across_the_input_buffer_read_whole() {
    // A list of 400,000 small ints and 3-byte strings, and one string larger than the
    // reader's buffer: every value straddling a buffer refill or a short read still reads.
    let mut p = vec![0x80, 4, b']', b'('];
    for i in 0..400_000u32 {
        if i > 0 && i % 1000 == 0 {
            // Python's pickler appends in batches of 1,000 (the stack stays bounded).
            p.extend_from_slice(b"e(");
        }
        if i % 3 == 0 {
            p.extend_from_slice(&[0x8c, 3]);
            p.extend_from_slice(format!("{:03}", i % 1000).as_bytes());
        } else {
            p.push(b'M');
            p.extend_from_slice(&(i as u16).to_le_bytes());
        }
    }
    let big = "z".repeat(3 * INPUT_BUF + 5);
    p.push(b'X');
    p.extend_from_slice(&(big.len() as u32).to_le_bytes());
    p.extend_from_slice(big.as_bytes());
    p.extend_from_slice(b"e.");
    for d in [
        decode_slice(&p).unwrap(),
        decode(Trickle(&p), p.len() as u64, Limits::for_len(p.len() as u64)).unwrap(),
    ] {
        let items: Vec<Value> = d.seq_of(d.root.unwrap()).unwrap().collect();
        assert_eq!(items.len(), 400_001);
        for (i, v) in items[..400_000].iter().enumerate() {
            if i % 3 == 0 {
                assert_eq!(
                    d.str_of(*v),
                    Some(format!("{:03}", i % 1000).as_str()),
                    "{i}"
                );
            } else {
                assert_eq!(*v, Value::Int((i as u16) as i64), "{i}");
            }
        }
        assert_eq!(d.str_of(items[400_000]), Some(big.as_str()));
    }
    // Cut inside the large string: the error names where that value began.
    let cut = &p[..p.len() - 10];
    let e = decode(
        Trickle(cut),
        p.len() as u64,
        Limits::for_len(p.len() as u64),
    )
    .unwrap_err();
    let at = (p.len() - 2 - big.len()) as u64;
    assert_eq!(
        e,
        PickleError::Truncated {
            at,
            what: "a string"
        }
    );
}
