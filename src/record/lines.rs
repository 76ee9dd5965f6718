//! One stream of the job's output, raw bytes as they come, split into lines for a
//! [`StderrWatcher`], with a cheap look first so that a job's ordinary output costs no more
//! than a search over its bytes: every word one of which a line must hold for the watcher to
//! do anything with it (the recogniser's keys, `record::recognise::table`, and the words that
//! open a block or a private key, [`STATE_KEYS`]) is searched at once, by its rarest piece,
//! over a whole chunk,
//! its line ends left out so that a word split across a hard-wrapped line is found too. A
//! line on which nothing was found, read while the watcher is outside every block, only
//! passes into the tail: it is not decoded, cut or matched against the table. Every other
//! line, and every line inside a block, is read by [`StderrWatcher::line`] exactly as before,
//! so the look changes what is recognised in no case (the tests compare the two on the
//! corpus of real logs and on random mixtures).

use super::recognise::table::PATTERNS;
use super::stderr::{ParsedError, StderrWatcher, LINE_CHARS, STATE_KEYS, TAIL_LINES};
use aho_corasick::{AhoCorasick, MatchKind};
use std::sync::LazyLock;

/// Longest line kept for recognition (the rest of a longer line is passed through only).
pub const MAX_LINE: usize = 64 * 1024;

/// The words' pieces searched at once ([`rarest_piece`]), and the longest word.
struct Look {
    words: AhoCorasick,
    longest: usize,
}

/// Bytes searched of each word: a line holding the word holds each piece of it.
const PIECE: usize = 4;

/// The piece of `word` ([`PIECE`] bytes) least likely in ordinary output: capitals, digits
/// and punctuation over lower-case letters and spaces (the SIMD search is fast when few of
/// its candidates are false).
fn rarest_piece(word: &str) -> &str {
    let b = word.as_bytes();
    if b.len() <= PIECE || !word.is_ascii() {
        return word;
    }
    let score = |c: u8| match c {
        b'a'..=b'z' | b' ' => 1u32,
        b'0'..=b'9' => 3,
        _ => 6,
    };
    let i = (0..=b.len() - PIECE)
        .max_by_key(|&i| {
            let s: u32 = b[i..i + PIECE].iter().map(|&c| score(c)).sum();
            (s, std::cmp::Reverse(i))
        })
        .unwrap_or(0);
    &word[i..i + PIECE]
}

/// Every word the look is for: the table's keys and the [`STATE_KEYS`].
fn words() -> Vec<&'static str> {
    PATTERNS
        .iter()
        .flat_map(|p| p.keys.iter().copied())
        .chain(STATE_KEYS)
        .collect()
}

static LOOK: LazyLock<Option<Look>> = LazyLock::new(|| {
    let all = words();
    let longest = all.iter().map(|w| w.len()).max()?;
    let mut words: Vec<&str> = all.into_iter().map(rarest_piece).collect();
    words.sort_unstable();
    words.dedup();
    // Leftmost-first: the kind whose search runs the SIMD multi-word prefilter (Teddy)
    // over the bytes; a hidden overlapping word is covered in `Lines::look`.
    let words = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostFirst)
        .build(&words)
        .ok()?;
    Some(Look { words, longest })
});

/// The bytes of `line` (raw, as cut to [`MAX_LINE`]) whose end is the end of what
/// `StderrWatcher::line` joins with the next line (the line decoded and cut to
/// `LINE_CHARS * 4` bytes): a word across the two ends with these bytes. `None` where that
/// cannot be said without decoding (a long line that is not UTF-8 in its first part): the
/// next line is then read in full.
fn joined_part(line: &[u8]) -> Option<&[u8]> {
    let cut = LINE_CHARS * 4;
    // Decoding makes a byte three at most (U+FFFD): a line this short is joined whole.
    if line.len() <= cut / 3 {
        return Some(line);
    }
    let head = &line[..line.len().min(cut)];
    match std::str::from_utf8(head) {
        Ok(_) => Some(head),
        // Only the last character is cut: what decoding keeps ends before it (or at a
        // replacement character, after which no word can go on).
        Err(e) if e.error_len().is_none() => Some(&head[..e.valid_up_to()]),
        Err(_) => None,
    }
}

/// One stream split into lines, for one watcher.
pub struct Lines {
    partial: Vec<u8>,
    watcher: StderrWatcher,
    /// The chunk's lines without their ends, after the last bytes of the line before.
    scan: Vec<u8>,
    /// Where each line starts in `scan`.
    starts: Vec<usize>,
    /// Each line's bytes in the chunk being read.
    spans: Vec<(usize, usize)>,
    /// Lines to read in full (sorted, unique).
    read: Vec<usize>,
    /// The end of the last line given to the watcher that a word of the next may continue
    /// ([`joined_part`], at most the longest word), or `None`: read the next in full.
    before: Option<Vec<u8>>,
}

impl Default for Lines {
    fn default() -> Lines {
        Lines {
            partial: Vec::new(),
            watcher: StderrWatcher::new(),
            scan: Vec::new(),
            starts: Vec::new(),
            spans: Vec::new(),
            read: Vec::new(),
            before: Some(Vec::new()),
        }
    }
}

impl Lines {
    /// Feed `bytes`; recognised lines are pushed to `found`.
    pub fn feed(&mut self, bytes: &[u8], found: &mut Vec<ParsedError>) {
        let mut rest = bytes;
        if !self.partial.is_empty() {
            let Some(i) = memchr::memchr2(b'\n', b'\r', rest) else {
                self.push(rest);
                return;
            };
            self.push(&rest[..i]);
            let line = std::mem::take(&mut self.partial);
            self.chunk(&line, found);
            self.partial = line;
            self.partial.clear();
            rest = &rest[i + 1..];
        }
        match memchr::memrchr2(b'\n', b'\r', rest) {
            Some(end) => {
                self.chunk(&rest[..end], found);
                self.push(&rest[end + 1..]);
            }
            None => self.push(rest),
        }
    }

    /// The last line, unterminated.
    pub fn finish(&mut self, found: &mut Vec<ParsedError>) {
        let line = std::mem::take(&mut self.partial);
        self.chunk(&line, found);
    }

    fn push(&mut self, seg: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.partial.len());
        self.partial.extend_from_slice(&seg[..seg.len().min(room)]);
    }

    /// Read `chunk`: whole lines, split at `\n` and `\r` (an empty line is no line).
    fn chunk(&mut self, chunk: &[u8], found: &mut Vec<ParsedError>) {
        self.spans.clear();
        let mut from = 0;
        for end in memchr::memchr2_iter(b'\n', b'\r', chunk).chain([chunk.len()]) {
            if end > from {
                self.spans.push((from, end.min(from + MAX_LINE)));
            }
            from = end + 1;
        }
        if self.spans.is_empty() {
            return;
        }
        self.look(chunk);
        let (mut i, mut next) = (0, 0);
        let n = self.spans.len();
        while i < n {
            while next < self.read.len() && self.read[next] < i {
                next += 1;
            }
            let stop = self.read.get(next).copied().unwrap_or(n);
            if stop > i && self.watcher.is_neutral() {
                let first = i.max(stop.saturating_sub(TAIL_LINES));
                let last: Vec<_> = self.spans[first..stop]
                    .iter()
                    .map(|&(a, b)| String::from_utf8_lossy(&chunk[a..b]))
                    .collect();
                let last: Vec<&str> = last.iter().map(|l| l.as_ref()).collect();
                self.watcher.passed_over(&last);
                i = stop;
                continue;
            }
            let (a, b) = self.spans[i];
            if let Some(f) = self.watcher.line(&String::from_utf8_lossy(&chunk[a..b])) {
                found.push(f);
            }
            i += 1;
        }
        let (a, b) = self.spans[n - 1];
        let longest = LOOK.as_ref().map_or(0, |l| l.longest);
        self.before =
            joined_part(&chunk[a..b]).map(|p| p[p.len().saturating_sub(longest)..].to_vec());
    }

    /// Which lines of `chunk` (`self.spans`) to read in full: the words found over the
    /// lines with their ends left out, each marking the lines it may end in.
    fn look(&mut self, chunk: &[u8]) {
        self.read.clear();
        let Some(look) = LOOK.as_ref() else {
            self.read.extend(0..self.spans.len());
            return;
        };
        self.scan.clear();
        self.starts.clear();
        match &self.before {
            Some(b) => self.scan.extend_from_slice(b),
            None => self.read.push(0),
        }
        for (k, &(a, b)) in self.spans.iter().enumerate() {
            self.starts.push(self.scan.len());
            let line = &chunk[a..b];
            self.scan.extend_from_slice(line);
            match joined_part(line) {
                // What is joined ends before the line does: its end again, then the next.
                Some(p) if p.len() < line.len() => {
                    self.scan.push(b'\n');
                    self.scan
                        .extend_from_slice(&p[p.len().saturating_sub(look.longest)..]);
                }
                Some(_) => {}
                None => {
                    self.scan.push(b'\n');
                    self.read.push(k + 1);
                }
            }
        }
        // A piece found is within its word, which ends within `longest` bytes of the
        // piece's end; a reported piece hides at most the pieces that start inside it
        // (leftmost-first: none starts before it), whose words end within `longest` bytes of
        // its end too.
        let line_of = |at: usize| self.starts.partition_point(|s| *s <= at).saturating_sub(1);
        let last = self.scan.len().saturating_sub(1);
        for m in look.words.find_iter(&self.scan) {
            let (lo, hi) = (
                line_of(m.start()),
                line_of((m.end() - 1 + look.longest).min(last)),
            );
            self.read.extend(lo..=hi);
        }
        self.read.sort_unstable();
        self.read.dedup();
    }

    pub fn tail(&self) -> Vec<String> {
        self.watcher.tail()
    }
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;
