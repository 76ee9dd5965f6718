//! The cheap look changes nothing: [`Lines`] finds exactly what the watcher finds when it is
//! given every line (the way `run` read the job's output before the look), and keeps the same
//! tail, on every log of the corpus (tests/it/corpus/logs) cut into chunks of many sizes, and
//! on random mixtures of corpus lines, their halves (hard-wrapped), the recogniser's keys,
//! block openers, private keys, long lines and bytes that are not UTF-8.

use super::*;
use crate::record::recognise::table::PATTERNS;
use proptest::prelude::*;

/// Every line given to the watcher: how the job's output was read before the look.
#[derive(Default)]
struct Unfiltered {
    partial: Vec<u8>,
    watcher: StderrWatcher,
}

impl Unfiltered {
    fn feed(&mut self, bytes: &[u8], found: &mut Vec<ParsedError>) {
        let mut rest = bytes;
        while let Some(i) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let seg = &rest[..i];
            if self.partial.is_empty() {
                self.take(seg, found);
            } else {
                self.push(seg);
                let line = std::mem::take(&mut self.partial);
                self.take(&line, found);
            }
            rest = &rest[i + 1..];
        }
        self.push(rest);
    }

    fn finish(&mut self, found: &mut Vec<ParsedError>) {
        let line = std::mem::take(&mut self.partial);
        self.take(&line, found);
    }

    fn push(&mut self, seg: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.partial.len());
        self.partial.extend_from_slice(&seg[..seg.len().min(room)]);
    }

    fn take(&mut self, line: &[u8], found: &mut Vec<ParsedError>) {
        if line.is_empty() {
            return;
        }
        let line = &line[..line.len().min(MAX_LINE)];
        found.extend(self.watcher.line(&String::from_utf8_lossy(line)));
    }
}

/// (found, tail) of `bytes` read unfiltered, in one piece.
fn unfiltered(bytes: &[u8]) -> (Vec<ParsedError>, Vec<String>) {
    let mut u = Unfiltered::default();
    let mut found = Vec::new();
    u.feed(bytes, &mut found);
    u.finish(&mut found);
    (found, u.watcher.tail())
}

/// (found, tail) of `bytes` read by [`Lines`], in chunks of the sizes `cuts` gives in turn.
fn looked(bytes: &[u8], cuts: &[usize]) -> (Vec<ParsedError>, Vec<String>) {
    let mut l = Lines::default();
    let mut found = Vec::new();
    let mut rest = bytes;
    let mut k = 0;
    while !rest.is_empty() {
        let n = cuts
            .get(k % cuts.len().max(1))
            .copied()
            .unwrap_or(rest.len());
        let n = n.clamp(1, rest.len());
        l.feed(&rest[..n], &mut found);
        rest = &rest[n..];
        k += 1;
    }
    l.finish(&mut found);
    (found, l.tail())
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/corpus/logs");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("the corpus of logs")
        .map(|e| e.expect("a corpus entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            let bytes = std::fs::read(&p).expect("a corpus log");
            (p.display().to_string(), bytes)
        })
        .collect();
    v.sort();
    v
}

static CORPUS_LINES: LazyLock<Vec<String>> = LazyLock::new(|| {
    corpus()
        .iter()
        .flat_map(|(_, b)| {
            String::from_utf8_lossy(b)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
});

#[test]
fn the_corpus_is_read_as_the_unfiltered_watcher_reads_it() {
    let logs = corpus();
    assert!(logs.len() >= 100, "{} logs", logs.len());
    let mut recognised = 0;
    for (name, bytes) in &logs {
        let want = unfiltered(bytes);
        recognised += want.0.len();
        for cuts in [&[usize::MAX][..], &[1], &[7, 300, 13], &[4096], &[65536]] {
            let got = looked(bytes, cuts);
            assert_eq!(got.0, want.0, "{name}, chunks {cuts:?}: found");
            assert_eq!(got.1, want.1, "{name}, chunks {cuts:?}: tail");
        }
        // All the corpus's logs one after the other, as one job would print them.
    }
    let all: Vec<u8> = logs.iter().flat_map(|(_, b)| b.clone()).collect();
    let want = unfiltered(&all);
    assert_eq!(
        looked(&all, &[65536]),
        want,
        "the whole corpus in one stream"
    );
    assert!(
        recognised >= 100,
        "{recognised} lines recognised in the corpus"
    );
}

#[test]
fn a_word_split_across_a_wrapped_line_and_a_chunk_is_still_found() {
    let whole = "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device \
                 0: cudaMalloc failed: out of memory";
    let at = whole.find("failed").unwrap_or(0) + 3;
    let text = format!("{}\n{}\nnext\n", &whole[..at], &whole[at..]);
    let want = unfiltered(text.as_bytes());
    assert_eq!(want.0.len(), 1, "{:?}", want.0);
    for cut in 1..text.len() {
        assert_eq!(
            looked(text.as_bytes(), &[cut, usize::MAX]),
            want,
            "cut at {cut}"
        );
    }
    // After a long line (joined by its first `LINE_CHARS * 4` bytes only).
    for long in [700, 1999, 2000, 2001, 5000] {
        let head = format!("{}{}", "é".repeat(long / 2), &whole[..at]);
        let text = format!("{head}\n{}\n", &whole[at..]);
        let want = unfiltered(text.as_bytes());
        assert_eq!(looked(text.as_bytes(), &[4096]), want, "{long}");
    }
}

/// One piece of a random log.
#[derive(Debug, Clone)]
enum Piece {
    Corpus(usize),
    /// A corpus line hard-wrapped at a position (two lines).
    Wrapped(usize, usize),
    /// A key of the table or a block opener, with text around it.
    Key(usize, String, String),
    /// A key split over two lines.
    KeySplit(usize, usize, String),
    Text(String),
    Bytes(Vec<u8>),
    Long(usize, u8),
    Pem,
}

fn mixed_words() -> Vec<&'static str> {
    PATTERNS
        .iter()
        .flat_map(|p| p.keys.iter().copied())
        .chain(STATE_KEYS)
        .chain([
            "] Stats:",
            "Limit: 1000",
            "InUse: 20",
            "Last error:",
            "rank",
            "exitcode  : -9",
        ])
        .collect()
}

fn piece() -> impl Strategy<Value = Piece> {
    let n = CORPUS_LINES.len().max(1);
    let w = mixed_words().len();
    prop_oneof![
        4 => (0..n).prop_map(Piece::Corpus),
        2 => (0..n, 0usize..200).prop_map(|(i, p)| Piece::Wrapped(i, p)),
        2 => (0..w, "[ -~]{0,70}", "[ -~]{0,70}").prop_map(|(i, a, b)| Piece::Key(i, a, b)),
        2 => (0..w, 0usize..60, "[ -~]{40,90}").prop_map(|(i, p, a)| Piece::KeySplit(i, p, a)),
        3 => "[ -~]{0,120}".prop_map(Piece::Text),
        1 => proptest::collection::vec(any::<u8>(), 0..80).prop_map(Piece::Bytes),
        1 => (600usize..2100, prop_oneof![Just(b'x'), Just(0xc3u8), Just(0xffu8)])
            .prop_map(|(n, b)| Piece::Long(n, b)),
        1 => Just(Piece::Pem),
    ]
}

fn end() -> impl Strategy<Value = &'static str> {
    prop_oneof![8 => Just("\n"), 1 => Just("\r"), 1 => Just("\r\n"), 1 => Just("\n\n")]
}

fn render(pieces: &[(Piece, &str)]) -> Vec<u8> {
    let words = mixed_words();
    let mut out = Vec::new();
    for (p, end) in pieces {
        match p {
            Piece::Corpus(i) => out.extend_from_slice(CORPUS_LINES[*i].as_bytes()),
            Piece::Wrapped(i, at) => {
                let l = &CORPUS_LINES[*i];
                let mut at = (*at).min(l.len());
                while !l.is_char_boundary(at) {
                    at -= 1;
                }
                out.extend_from_slice(&l.as_bytes()[..at]);
                out.extend_from_slice(end.as_bytes());
                out.extend_from_slice(&l.as_bytes()[at..]);
            }
            Piece::Key(i, a, b) => {
                out.extend_from_slice(a.as_bytes());
                out.extend_from_slice(words[*i].as_bytes());
                out.extend_from_slice(b.as_bytes());
            }
            Piece::KeySplit(i, at, a) => {
                let k = words[*i];
                let at = (*at).min(k.len());
                out.extend_from_slice(a.as_bytes());
                out.extend_from_slice(&k.as_bytes()[..at]);
                out.extend_from_slice(end.as_bytes());
                out.extend_from_slice(&k.as_bytes()[at..]);
            }
            Piece::Text(t) => out.extend_from_slice(t.as_bytes()),
            Piece::Bytes(b) => out.extend_from_slice(b),
            Piece::Long(n, b) => {
                out.extend(std::iter::repeat_n(*b, *n));
                out.extend_from_slice(b"CUDA error: out");
            }
            Piece::Pem => out.extend_from_slice(
                b"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
            ),
        }
        out.extend_from_slice(end.as_bytes());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Random mixtures in random chunks: the same lines found, the same tail.
    #[test]
    fn random_mixtures_are_read_as_the_unfiltered_watcher_reads_them(
        pieces in proptest::collection::vec((piece(), end()), 0..80),
        cuts in proptest::collection::vec(1usize..3000, 1..8),
    ) {
        let bytes = render(&pieces);
        let want = unfiltered(&bytes);
        let got = looked(&bytes, &cuts);
        prop_assert_eq!(&got.0, &want.0);
        prop_assert_eq!(&got.1, &want.1);
    }
}

#[test]
fn every_word_looked_for_is_ascii_within_a_line_and_found_by_its_piece() {
    for w in super::words() {
        assert!(
            w.is_ascii() && !w.contains(['\n', '\r']) && !w.is_empty(),
            "{w:?}"
        );
        let p = rarest_piece(w);
        assert!(
            w.contains(p) && (p.len() == PIECE || p == w),
            "{w:?}: {p:?}"
        );
    }
    assert_eq!(rarest_piece("CUDA out of memory"), "CUDA");
}
