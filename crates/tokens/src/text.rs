//! Deterministic synthetic text: the word vocabulary and the text of hash blocks and tails.
//!
//! Every synthesized token is one word from the vocabulary (`WORDS`), written with a leading space. Each entry is a
//! single token, leading space included, in the cl100k_base, o200k_base and r50k_base BPE vocabularies
//! (the most frequent such words of 3 to 7 letters), so `TokenCounter::Words` counts synthesized text
//! exactly and a real BPE tokenizer counts it almost exactly. The text of a block is a pure function of
//! (trace key, hash id); the trace key is derived from (seed, trace id), so equal hash ids within a trace
//! give byte-equal text and different traces (or seeds) give unrelated text. The words come from
//! keyed hashing (SplitMix64's mix), not from a random generator: this is content addressing, and the
//! prefix cache reuses a block only if its text is the same wherever the hash id appears.

use sha2::{Digest, Sha256};

/// Number of words in the vocabulary; a power of two so 10 random bits pick one word.
const VOCAB_LEN: usize = 1024;

/// The vocabulary, without the leading space that every synthesized word carries.
#[rustfmt::skip]
pub(crate) const WORDS: [&str; VOCAB_LEN] = [
    "the", "and", "for", "con", "this", "that", "with", "pro", "com", "return", "you", "new",
    "from", "are", "int", "class", "not", "was", "public", "res", "str", "have", "get", "can",
    "self", "all", "cont", "will", "your", "out", "has", "def", "but", "const", "void", "set",
    "var", "else", "more", "his", "they", "per", "data", "one", "dis", "name", "true", "end",
    "null", "pre", "their", "private", "who", "time", "man", "which", "any", "false", "value",
    "app", "about", "add", "string", "over", "des", "type", "inter", "part", "work", "when", "use",
    "off", "other", "been", "sup", "acc", "had", "were", "file", "would", "our", "year", "val",
    "some", "there", "said", "her", "comm", "ass", "like", "let", "also", "than", "static", "just",
    "result", "them", "into", "what", "pos", "list", "case", "first", "import", "act", "char",
    "only", "print", "its", "back", "need", "sub", "start", "user", "ent", "under", "reg", "then",
    "may", "org", "how", "people", "ind", "should", "test", "bet", "make", "after", "right", "long",
    "rem", "ext", "min", "loc", "array", "she", "exp", "par", "read", "rel", "form", "trans",
    "want", "comp", "number", "require", "col", "key", "two", "size", "where", "arg", "while",
    "rec", "spec", "look", "could", "know", "ser", "hand", "most", "try", "now", "him", "break",
    "every", "point", "std", "fil", "mod", "error", "text", "pol", "show", "find", "current",
    "used", "play", "log", "see", "help", "these", "pass", "down", "even", "item", "don", "did",
    "through", "inv", "last", "event", "again", "high", "line", "does", "tem", "before", "because",
    "dist", "state", "cons", "here", "final", "del", "run", "very", "model", "mon", "way", "call",
    "att", "cal", "dec", "num", "well", "object", "years", "default", "ins", "java", "sim", "view",
    "pres", "bel", "many", "being", "good", "using", "stud", "request", "child", "param", "echo",
    "person", "style", "que", "method", "expect", "prot", "sur", "found", "post", "such", "think",
    "differ", "much", "som", "http", "count", "inst", "gener", "med", "check", "open", "est",
    "next", "follow", "includ", "href", "car", "bool", "game", "path", "each", "support", "own",
    "cor", "mem", "sex", "sign", "those", "err", "system", "best", "same", "create", "made", "mark",
    "group", "fin", "world", "process", "cre", "main", "color", "report", "take", "day", "comple",
    "top", "free", "action", "index", "real", "max", "build", "message", "input", "art", "between",
    "table", "head", "must", "order", "mov", "contin", "say", "ter", "product", "double", "place",
    "oper", "week", "prop", "program", "und", "struct", "code", "without", "sol", "ref", "still",
    "assert", "cap", "rep", "field", "cour", "team", "second", "going", "range", "fam", "nil",
    "fact", "vis", "android", "writ", "ret", "home", "left", "direct", "exper", "allow", "beg",
    "page", "around", "rece", "really", "image", "target", "dep", "both", "put", "level", "config",
    "local", "content", "quest", "float", "develop", "poss", "too", "extends", "fore", "great",
    "month", "happ", "super", "title", "context", "met", "life", "incre", "src", "catch", "pay",
    "coun", "change", "old", "book", "version", "three", "law", "base", "conf", "during", "console",
    "spe", "against", "power", "wom", "iss", "width", "label", "project", "element", "success",
    "date", "tot", "tri", "big", "map", "pop", "few", "len", "dem", "ear", "match", "node",
    "another", "sit", "care", "effect", "fun", "leg", "service", "since", "non", "los", "full",
    "turn", "body", "produ", "stand", "proble", "block", "keep", "throw", "things", "url", "red",
    "control", "come", "custom", "source", "eas", "await", "partic", "prov", "mill", "chang", "ask",
    "output", "email", "disc", "govern", "might", "never", "hard", "intern", "called", "cho",
    "options", "height", "small", "ide", "access", "job", "address", "uint", "sum", "little", "fri",
    "port", "status", "appe", "update", "link", "given", "better", "feel", "already", "always",
    "parent", "got", "less", "account", "der", "lot", "valid", "bit", "sure", "prom", "boolean",
    "search", "orig", "invest", "says", "temp", "rest", "perform", "ver", "mult", "die", "site",
    "values", "beh", "won", "video", "cert", "prof", "cell", "player", "cost", "hum", "offic",
    "total", "stat", "load", "clear", "techn", "row", "seem", "short", "company", "done", "gre",
    "belie", "health", "args", "obj", "cur", "days", "initial", "online", "organ", "reason",
    "within", "design", "cent", "arr", "bro", "school", "func", "eng", "include", "init", "ann",
    "stop", "later", "client", "love", "json", "able", "men", "give", "copy", "occ", "appro",
    "either", "lead", "family", "option", "exist", "offer", "water", "che", "step", "display",
    "times", "four", "far", "present", "bas", "lib", "room", "once", "results", "talk", "grow",
    "mass", "mean", "aut", "until", "market", "area", "length", "mus", "kind", "light", "side",
    "example", "camp", "miss", "based", "plan", "away", "lik", "button", "render", "near",
    "country", "author", "along", "express", "begin", "imp", "win", "thing", "why", "doesn",
    "single", "driver", "rights", "ant", "women", "season", "dest", "sever", "didn", "sent", "enc",
    "command", "recent", "money", "told", "equ", "auto", "working", "query", "window", "least",
    "expl", "column", "record", "dat", "making", "close", "percent", "past", "write", "move", "pat",
    "special", "city", "eff", "tell", "select", "font", "course", "late", "amount", "async", "ben",
    "enough", "looking", "hold", "pot", "low", "para", "price", "today", "polit", "adv", "attack",
    "means", "story", "meet", "mom", "den", "sort", "thought", "task", "opt", "det", "review",
    "switch", "above", "word", "provide", "publish", "cover", "whether", "div", "having", "exc",
    "employ", "fre", "large", "fac", "created", "host", "role", "export", "web", "dev", "deal",
    "problem", "press", "though", "points", "ever", "ident", "million", "aff", "conc", "happen",
    "server", "les", "files", "often", "info", "space", "store", "format", "details", "prob",
    "face", "save", "typ", "items", "social", "mar", "redu", "major", "yet", "food", "members",
    "comb", "bar", "send", "inc", "params", "become", "diff", "makes", "global", "contact", "abs",
    "except", "certain", "impro", "news", "device", "below", "media", "fail", "black", "added",
    "buy", "came", "delete", "card", "https", "root", "handle", "getting", "comput", "claim", "air",
    "enter", "night", "doing", "pick", "watch", "human", "dam", "tax", "girl", "box", "strong",
    "msg", "house", "track", "pack", "pract", "section", "wait", "throws", "terms", "apply",
    "session", "others", "fund", "several", "subject", "esc", "history", "users", "mot", "future",
    "started", "mode", "took", "games", "bad", "needs", "known", "exec", "seen", "border", "live",
    "hope", "young", "website", "study", "network", "limit", "cut", "cou", "sizeof", "went", "fire",
    "across", "visit", "token", "months", "anim", "ess", "learn", "decl", "mind", "quick",
    "comment", "admin", "opp", "pur", "series", "hot", "bill", "frame", "draw", "deter", "comes",
    "elect", "filter", "larg", "remove", "front", "dig", "gen", "ste", "util", "associ", "wor",
    "printf", "activ", "virtual", "hours", "war", "models", "early", "center", "inf", "ago", "easy",
    "fig", "buffer", "vari", "due", "por", "cannot", "white", "pred", "auth", "period", "vot",
    "screen", "tmp", "benef", "net", "neg", "common", "cred", "suggest", "accept", "random",
    "respons", "hit", "click", "players", "among", "deb", "circ", "answer", "walk", "treat", "age",
    "req", "five", "friend", "clean", "words", "header", "tre", "discuss", "issue", "land",
    "stream", "quality", "sal", "works", "half", "police", "simple", "empty", "agre", "cook",
    "nothing", "running", "mor", "someone", "share", "entry", "changes", "offset", "pie", "events",
    "invol", "whole", "needed", "likely", "fight", "writing", "rate", "correct", "fall", "vol",
    "indu", "pret", "believe", "minutes", "similar", "taken", "isn", "son", "necess", "moment",
    "bring", "indic", "entire", "trying", "member", "phys", "foot", "board", "sus", "push",
    "please", "types", "clos", "edit", "energ", "phot", "cult", "defined", "thread", "instead",
    "idea", "coll", "film", "compet", "conn", "compan", "teach", "phone", "active", "death",
    "article", "almost", "sell", "applic", "connect", "feature", "via", "lim", "ens", "compl",
    "install", "general", "asked", "infl", "icon", "party", "vector", "normal", "further", "music",
    "speed", "doc", "taking", "viol", "forward", "crit", "failed", "concern", "sender", "term",
    "consum", "enjoy", "returns", "weight", "trad", "module", "favor", "mer", "loss", "engine",
    "issues", "parse", "stay", "dom", "lower", "perfect", "educ", "exact", "former", "six",
    "margin", "heart", "rather", "cas", "however", "inside", "graph", "tag", "attempt", "round",
    "friends", "alt", "chall", "energy", "hor",
];

/// Longest word plus its leading space; every word fits one 8-byte store.
const SLOT: usize = 8;

/// A table of 1024 words, each with its leading space, padded into an 8-byte slot.
///
/// [`Vocabulary::STANDARD`] holds the whole vocabulary; a tokenizer's table
/// ([`crate::TokenCounter::vocabulary`]) keeps the words it encodes as one token and repeats them to
/// fill the table, so text generation has one code path.
#[derive(Clone, PartialEq, Eq)]
pub struct Vocabulary {
    slots: [[u8; SLOT]; VOCAB_LEN],
    lens: [u8; VOCAB_LEN],
    distinct: usize,
}

impl std::fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocabulary")
            .field("distinct", &self.distinct)
            .finish()
    }
}

impl Vocabulary {
    /// The whole vocabulary, every word once.
    pub const STANDARD: Vocabulary = build_standard();

    /// The words of [`WORDS`] for which `keep` holds, repeated to fill the table; `None` if none is kept.
    pub(crate) fn filtered(mut keep: impl FnMut(&str) -> bool) -> Option<Vocabulary> {
        let kept: Vec<usize> = (0..VOCAB_LEN).filter(|&i| keep(WORDS[i])).collect();
        if kept.is_empty() {
            return None;
        }
        let standard = &Self::STANDARD;
        let mut table = Vocabulary {
            slots: [[0; SLOT]; VOCAB_LEN],
            lens: [0; VOCAB_LEN],
            distinct: kept.len(),
        };
        for i in 0..VOCAB_LEN {
            let src = kept[i % kept.len()];
            table.slots[i] = standard.slots[src];
            table.lens[i] = standard.lens[src];
        }
        Some(table)
    }

    /// Number of distinct words in the table.
    pub fn distinct(&self) -> usize {
        self.distinct
    }
}

const fn build_standard() -> Vocabulary {
    let mut slots = [[0u8; SLOT]; VOCAB_LEN];
    let mut lens = [0u8; VOCAB_LEN];
    let mut i = 0;
    while i < VOCAB_LEN {
        let word = WORDS[i].as_bytes();
        assert!(word.len() < SLOT, "vocabulary word too long for its slot");
        slots[i][0] = b' ';
        let mut j = 0;
        while j < word.len() {
            slots[i][j + 1] = word[j];
            j += 1;
        }
        lens[i] = (word.len() + 1) as u8;
        i += 1;
    }
    Vocabulary {
        slots,
        lens,
        distinct: VOCAB_LEN,
    }
}

/// SplitMix64's step and finaliser: a bijective 64-bit mix, hashing keys into block and tail words.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The per-trace key of block text: the first 8 bytes of sha256("agentx-text:{seed}:{trace_id}").
pub fn trace_key(seed: u64, trace_id: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(b"agentx-text:");
    hasher.update(seed.to_string().as_bytes());
    hasher.update(b":");
    hasher.update(trace_id.as_bytes());
    let digest = hasher.finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
}

/// The corpus-wide key of block text for a corpus whose hash ids are global: the first 8 bytes of
/// sha256("agentx-text-global:{seed}"), so equal hash ids give equal text in every trace of the corpus.
pub fn corpus_key(seed: u64) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(b"agentx-text-global:");
    hasher.update(seed.to_string().as_bytes());
    let digest = hasher.finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
}

/// Domain separators so block, tail and other streams of one trace never coincide.
const BLOCK_DOMAIN: u64 = 0x426c_6f63_6b00_0000; // "Block"
const TAIL_DOMAIN: u64 = 0x5461_696c_0000_0000; // "Tail"

/// Stream seed of the block with `hash_id` in the trace with `key`.
#[inline]
pub fn block_stream(key: u64, hash_id: u32) -> u64 {
    mix64(key ^ mix64(BLOCK_DOMAIN ^ u64::from(hash_id)))
}

/// Stream seed of the synthesized tail of turn `turn` (tokens past the last hash block).
#[inline]
pub fn tail_stream(key: u64, turn: u32) -> u64 {
    mix64(key ^ mix64(TAIL_DOMAIN ^ u64::from(turn)))
}

/// Appends `word_count` words of the stream `stream` to `out`. The first `m` words of a stream are
/// the same for every `word_count >= m`, so a partial block is a byte prefix of the full block.
pub fn push_words(vocab: &Vocabulary, out: &mut Vec<u8>, stream: u64, word_count: usize) {
    if word_count == 0 {
        return;
    }
    let start = out.len();
    // Write whole 8-byte slots and advance by each word's length: one store per word, no branches on
    // the word length. The final truncate drops the slack of the last slot.
    out.resize(start + word_count * SLOT + SLOT, 0);
    let buf = &mut out[start..];
    let mut pos = 0usize;
    for_each_word(stream, word_count, |idx| {
        buf[pos..pos + SLOT].copy_from_slice(&vocab.slots[idx]);
        pos += vocab.lens[idx] as usize;
    });
    out.truncate(start + pos);
}

/// The bytes [`push_words`] appends for the same words, without writing them: a body whose text
/// is written as it is sent knows its length before the first byte.
pub fn words_len(vocab: &Vocabulary, stream: u64, word_count: usize) -> usize {
    let mut len = 0usize;
    for_each_word(stream, word_count, |idx| len += vocab.lens[idx] as usize);
    len
}

/// Calls `visit` with the vocabulary index of each of the first `word_count` words of `stream`:
/// six 10-bit draws from each 64-bit mix of a Weyl sequence.
#[inline(always)]
fn for_each_word(stream: u64, word_count: usize, mut visit: impl FnMut(usize)) {
    let mut state = stream;
    let mut bits = 0u64;
    let mut left = 0u32;
    for _ in 0..word_count {
        if left == 0 {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            bits = mix64(state);
            left = 6;
        }
        visit((bits & (VOCAB_LEN as u64 - 1)) as usize);
        bits >>= 10;
        left -= 1;
    }
}

/// Upper bound of the bytes `push_words` writes for `word_count` words.
pub const fn max_bytes(word_count: usize) -> usize {
    word_count * SLOT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_is_unique_lowercase_words() {
        let mut seen = std::collections::HashSet::new();
        for w in WORDS {
            assert!(w.len() >= 3 && w.len() < SLOT, "{w}");
            assert!(w.bytes().all(|b| b.is_ascii_lowercase()), "{w}");
            assert!(seen.insert(w), "duplicate {w}");
        }
    }

    #[test]
    fn words_len_is_the_length_push_words_writes() {
        let short_words = Vocabulary::filtered(|word| word.len() <= 4).expect("short words");
        for vocab in [&Vocabulary::STANDARD, &short_words] {
            for (id, count) in [(0, 0), (1, 1), (7, 16), (9, 64), (11, 1000)] {
                let stream = block_stream(trace_key(42, "t"), id);
                let mut out = vec![b'x'];
                push_words(vocab, &mut out, stream, count);
                assert_eq!(
                    words_len(vocab, stream, count),
                    out.len() - 1,
                    "{id} {count}"
                );
            }
        }
    }

    #[test]
    fn partial_block_is_a_prefix_and_counts_words() {
        let s = block_stream(trace_key(42, "t"), 7);
        let mut full = Vec::new();
        push_words(&Vocabulary::STANDARD, &mut full, s, 64);
        let mut part = Vec::new();
        push_words(&Vocabulary::STANDARD, &mut part, s, 13);
        assert!(full.starts_with(&part));
        let text = std::str::from_utf8(&full).unwrap();
        assert_eq!(text.split_ascii_whitespace().count(), 64);
        assert!(text.starts_with(' '));
    }

    #[test]
    fn filtered_vocabulary_only_emits_kept_words() {
        let v = Vocabulary::filtered(|w| w == "the" || w == "and").unwrap();
        assert_eq!(v.distinct(), 2);
        let mut out = Vec::new();
        push_words(&v, &mut out, 99, 50);
        let text = String::from_utf8(out).unwrap();
        assert!(text
            .split_ascii_whitespace()
            .all(|w| w == "the" || w == "and"));
        assert!(Vocabulary::filtered(|_| false).is_none());
    }

    #[test]
    fn keys_separate_traces_seeds_and_blocks() {
        let a = trace_key(1, "trace_0001");
        assert_ne!(a, trace_key(2, "trace_0001"));
        assert_ne!(a, trace_key(1, "trace_0002"));
        assert_ne!(block_stream(a, 1), block_stream(a, 2));
        assert_ne!(block_stream(a, 1), tail_stream(a, 1));
    }
}
