//! The synthetic template tree both seal/open benchmarks use: `benches/seal_open.rs` (the
//! library) and `examples/bench_tree.rs`, which writes it for `scripts/bench-seal-open.sh`
//! (the shipped `packer` against the stock tools).
//!
//! Every handlebars expression names a variable of the runtime's contract (schema 1), so
//! the `.hbs` files pass `packer build`'s strict validation like real templates do.

use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// String variables of the contract, for inline expressions.
const STRINGS: &[&str] = &["persona", "data_dir", "role_directory"];
/// Bool variables of the contract, for `{{#if}}` blocks.
const FLAGS: &[&str] = &[
    "tools.read",
    "tools.bash",
    "tools.grep",
    "tools.skill",
    "features.delegation",
    "features.memory",
    "memory.enabled",
    "surface.interactive",
    "surface.cli",
    "layer.root",
];

/// How a tree is laid out: where files go and what they are. Every shape fits the clients'
/// limits at 100 MB (at most 10,000 files, 16 MiB each) and has the templates they require
/// once `packs/builtin` is copied in.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub name: &'static str,
    /// Directory levels under an area, drawn uniformly.
    depth: (u32, u32),
    /// Suffixes a directory name takes (`word-N`): fewer means more files per directory.
    dir_variants: u32,
    /// File extensions, drawn uniformly (repeat one to weigh it).
    exts: &'static [&'static str],
    /// Log-uniform size range of a template (`.hbs`), in KB.
    template_kb: (f64, f64),
    /// Log-uniform size range of any other file, in KB.
    other_kb: (f64, f64),
}

/// The shapes `scripts/bench-seal-open.sh` takes as `SHAPE=`, `mixed` first (the default).
pub const SHAPES: &[Shape] = &[
    // Prompt-sized templates among documents of 1-120 KB, 1-3 levels deep: about 4,800
    // files for 100 MB, a fifth of them templates (5 MB).
    Shape {
        name: "mixed",
        depth: (1, 3),
        dir_variants: 12,
        exts: &["md", "md", "md", "hbs", "txt"],
        template_kb: (1.0, 16.0),
        other_kb: (1.0, 120.0),
    },
    // As many files as the limit allows (about 8,900 for 100 MB, 4-24 KB each), one level
    // deep, many to a directory.
    Shape {
        name: "small-shallow",
        depth: (1, 1),
        dir_variants: 3,
        exts: &["md", "md", "md", "hbs", "txt"],
        template_kb: (4.0, 24.0),
        other_kb: (4.0, 24.0),
    },
    // A few documents of 2-12 MB (about 18 for 100 MB) and the built-in templates.
    Shape {
        name: "few-large",
        depth: (1, 2),
        dir_variants: 12,
        exts: &["md", "txt"],
        template_kb: (1.0, 16.0),
        other_kb: (2000.0, 12000.0),
    },
    // Markdown and text 3-7 levels deep, one file in twenty a template: about 4,000 files.
    Shape {
        name: "markdown",
        depth: (3, 7),
        dir_variants: 12,
        exts: &[
            "md", "md", "md", "md", "md", "md", "md", "md", "md", "md", "md", "md", "txt", "txt",
            "txt", "txt", "txt", "txt", "txt", "hbs",
        ],
        template_kb: (1.0, 16.0),
        other_kb: (1.0, 120.0),
    },
    // Nine files in ten templates of 3-32 KB: about 8,000 templates, 90 MB of them.
    Shape {
        name: "templates",
        depth: (1, 3),
        dir_variants: 12,
        exts: &[
            "hbs", "hbs", "hbs", "hbs", "hbs", "hbs", "hbs", "hbs", "hbs", "md",
        ],
        template_kb: (3.0, 32.0),
        other_kb: (1.0, 120.0),
    },
    // Not one the code was tuned on: prose, JSON and code side by side, 0.1-400 KB each
    // (log-uniform), 1-4 levels deep; about 2,000 files for 100 MB, one in ten a template.
    Shape {
        name: "corpus",
        depth: (1, 4),
        dir_variants: 8,
        exts: &[
            "md", "md", "txt", "json", "json", "py", "rs", "rs", "hbs", "md",
        ],
        template_kb: (0.5, 24.0),
        other_kb: (0.1, 400.0),
    },
];

/// The shape called `name`, if there is one.
pub fn shape(name: &str) -> Option<Shape> {
    SHAPES.iter().copied().find(|shape| shape.name == name)
}

/// Writes a template tree of about `target` bytes in `shape`: areas / directories / files,
/// each file a mix of markdown prose, handlebars blocks and the odd code sample, identifier
/// or hash. Words come from a Zipf-distributed vocabulary so the text compresses like real
/// prose (about 3-5x with zstd -3), not like repeated boilerplate. The same seed and shape
/// give the same tree.
pub fn generate_shape(root: &Path, target: u64, seed: u64, shape: Shape) -> Result<(usize, u64)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let words = Vocabulary::new(&mut rng, 6000);
    let areas = ["agents", "shared", "skills", "tools", "modes", "locales"];
    let mut files = 0;
    let mut written = 0u64;
    while written < target {
        let mut dir = root.join(areas[rng.random_range(0..areas.len())]);
        for _ in 0..rng.random_range(shape.depth.0..=shape.depth.1) {
            dir.push(format!(
                "{}-{}",
                words.pick(&mut rng),
                rng.random_range(0..shape.dir_variants)
            ));
        }
        std::fs::create_dir_all(&dir)?;
        let ext = shape.exts[rng.random_range(0..shape.exts.len())];
        let path = dir.join(format!("{}-{files}.{ext}", words.pick(&mut rng)));
        // Log-uniform sizes: templates (`.hbs`, validated by `packer build`) are prompt-sized,
        // the other files (documents the prompts ship with) many small, a few long.
        let (smallest, largest) = if ext == "hbs" {
            shape.template_kb
        } else {
            shape.other_kb
        };
        let size = (1000.0 * smallest * (largest / smallest).powf(rng.random::<f64>())) as usize;
        let size = size.min((target - written) as usize).max(1);
        let text = match ext {
            "json" => json_text(&mut rng, &words, size),
            "py" | "rs" => code_text(&mut rng, &words, size, ext),
            _ => template_text(&mut rng, &words, size),
        };
        std::fs::write(&path, &text)?;
        written += text.len() as u64;
        files += 1;
    }
    Ok((files, written))
}

struct Vocabulary {
    words: Vec<String>,
    /// Sentences that recur across files.
    phrases: Vec<String>,
    /// Cumulative Zipf weights, for sampling by binary search.
    cumulative: Vec<f64>,
}

impl Vocabulary {
    fn new(rng: &mut StdRng, size: usize) -> Self {
        const COMMON: &[&str] = &[
            "the", "you", "to", "and", "a", "of", "is", "in", "must", "the user", "tool", "never",
            "always", "agent", "when", "with", "for", "file", "that", "not", "task", "should",
            "it", "be", "your", "this", "answer", "before", "if", "or", "use", "only", "code",
            "run", "ask", "each", "model",
        ];
        const SYLLABLES: &[&str] = &[
            "ka", "ro", "mi", "te", "sun", "val", "or", "en", "pa", "li", "dor", "ex", "qu", "an",
            "is", "tor", "bel", "ce", "di", "fo", "gra", "hy", "im", "jo", "lu", "mar", "ne", "op",
            "ri", "st", "ul", "ve", "wy", "za", "ph", "th", "ion", "ent", "ure", "al",
        ];
        let mut words: Vec<String> = COMMON.iter().map(|w| w.to_string()).collect();
        while words.len() < size {
            let n = rng.random_range(1..=4);
            words.push(
                (0..n)
                    .map(|_| SYLLABLES[rng.random_range(0..SYLLABLES.len())])
                    .collect(),
            );
        }
        let mut total = 0.0;
        let cumulative = (1..=words.len())
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(1.05);
                total
            })
            .collect();
        let mut vocabulary = Vocabulary {
            words,
            cumulative,
            phrases: Vec::new(),
        };
        vocabulary.phrases = (0..3000)
            .map(|_| {
                let mut phrase = String::new();
                fresh_sentence(rng, &vocabulary, &mut phrase);
                phrase
            })
            .collect();
        vocabulary
    }

    fn pick(&self, rng: &mut StdRng) -> &str {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let x = rng.random::<f64>() * total;
        let i = self
            .cumulative
            .partition_point(|&c| c < x)
            .min(self.words.len() - 1);
        &self.words[i]
    }
}

fn sentence(rng: &mut StdRng, words: &Vocabulary, out: &mut String) {
    // Real templates repeat themselves: the same rule or phrase shows up in many files.
    if rng.random_range(0..100) < STOCK_PHRASE_PERCENT {
        out.push_str(&words.phrases[rng.random_range(0..words.phrases.len())]);
        return;
    }
    fresh_sentence(rng, words, out);
}

/// Share of sentences taken from the stock phrases; tuned so zstd -3 lands near 3.5x.
const STOCK_PHRASE_PERCENT: u32 = 50;

fn fresh_sentence(rng: &mut StdRng, words: &Vocabulary, out: &mut String) {
    let n = rng.random_range(5..22);
    for i in 0..n {
        let word = words.pick(rng);
        if i == 0 {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                out.extend(first.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push(' ');
            match rng.random_range(0..60) {
                0 => out.push_str(&format!("`{word}_{}`", rng.random_range(0..100))),
                1 => out.push_str(&format!(
                    "{{{{{}}}}}",
                    STRINGS[rng.random_range(0..STRINGS.len())]
                )),
                2 => out.push_str(&format!("{}", rng.random_range(0..1000))),
                _ => out.push_str(word),
            }
        }
        if i + 1 < n && rng.random_range(0..9) == 0 {
            out.push(',');
        }
    }
    out.push_str([".", ".", ".", "?", ":"][rng.random_range(0..5)]);
}

fn template_text(rng: &mut StdRng, words: &Vocabulary, size: usize) -> String {
    let mut out = String::with_capacity(size + 512);
    while out.len() < size {
        match rng.random_range(0..12) {
            0 => {
                out.push_str(["# ", "## ", "### "][rng.random_range(0..3)]);
                sentence(rng, words, &mut out);
                out.push_str("\n\n");
            }
            1 | 2 => {
                for _ in 0..rng.random_range(2..7) {
                    out.push_str("- ");
                    sentence(rng, words, &mut out);
                    out.push('\n');
                }
                out.push('\n');
            }
            3 => {
                let flag = FLAGS[rng.random_range(0..FLAGS.len())];
                out.push_str(&format!("{{{{#if {flag}}}}}\n"));
                sentence(rng, words, &mut out);
                out.push_str("\n{{else}}\n");
                sentence(rng, words, &mut out);
                out.push_str("\n{{/if}}\n\n");
            }
            4 => {
                // Inside the block `this` is a skill: prose there may not name root
                // variables, so the prose goes after it.
                out.push_str(
                    "{{#each skills}}\n* {{this.name}}: {{this.description}}\n{{/each}}\n",
                );
                sentence(rng, words, &mut out);
                out.push_str("\n\n");
            }
            5 => {
                out.push_str("```\n");
                for _ in 0..rng.random_range(1..6) {
                    out.push_str(&format!(
                        "{}_{:x} = \"{}\"  # {:016x}\n",
                        words.pick(rng),
                        rng.random::<u16>(),
                        words.pick(rng),
                        rng.random::<u64>()
                    ));
                }
                out.push_str("```\n\n");
            }
            _ => {
                for _ in 0..rng.random_range(2..7) {
                    sentence(rng, words, &mut out);
                    out.push(' ');
                }
                out.push_str("\n\n");
            }
        }
    }
    // Cut at a char boundary at or past `size`: sizes vary anyway.
    out
}

/// A JSON document of about `size` bytes: an array of records with words, numbers, flags
/// and nested lists, as configuration or data files shipped next to prompts are.
fn json_text(rng: &mut StdRng, words: &Vocabulary, size: usize) -> String {
    let mut out = String::with_capacity(size + 512);
    out.push_str("[\n");
    let mut first = true;
    while out.len() < size {
        if !first {
            out.push_str(",\n");
        }
        first = false;
        out.push_str(&format!(
            "  {{\"id\": \"{}-{:08x}\", \"score\": {:.4}, \"enabled\": {}, \"count\": {},\n",
            words.pick(rng),
            rng.random::<u32>(),
            rng.random::<f64>(),
            rng.random::<bool>(),
            rng.random_range(0..100_000)
        ));
        out.push_str("   \"tags\": [");
        for i in 0..rng.random_range(0..6) {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("\"{}\"", words.pick(rng)));
        }
        out.push_str("],\n   \"note\": \"");
        let mut note = String::new();
        fresh_sentence(rng, words, &mut note);
        out.push_str(&note.replace(['{', '}', '"', '`'], ""));
        out.push_str("\"}");
    }
    out.push_str("\n]\n");
    out
}

/// Source code of about `size` bytes (`ext` is `py` or `rs`): functions with identifiers,
/// comments, literals and the odd hex constant.
fn code_text(rng: &mut StdRng, words: &Vocabulary, size: usize, ext: &str) -> String {
    let mut out = String::with_capacity(size + 512);
    let rust = ext == "rs";
    while out.len() < size {
        let name = format!("{}_{}", words.pick(rng), words.pick(rng)).replace(' ', "_");
        let mut comment = String::new();
        fresh_sentence(rng, words, &mut comment);
        let comment = comment.replace(['{', '}'], "");
        if rust {
            out.push_str(&format!(
                "/// {comment}\npub fn {name}(input: &str, limit: usize) -> Option<usize> {{\n"
            ));
        } else {
            out.push_str(&format!(
                "def {name}(value, limit={}):\n    \"\"\"{comment}\"\"\"\n",
                rng.random_range(1..512)
            ));
        }
        for _ in 0..rng.random_range(2..12) {
            let var = words.pick(rng).replace(' ', "_");
            let line = match rng.random_range(0..4) {
                0 if rust => format!("    let {var} = input.find(\"{}\")?;\n", words.pick(rng)),
                0 => format!("    {var} = value.get(\"{}\", None)\n", words.pick(rng)),
                1 if rust => format!(
                    "    if limit > {} {{ return None; }}\n",
                    rng.random_range(0..4096)
                ),
                1 => format!(
                    "    if limit > {}:\n        return None\n",
                    rng.random_range(0..4096)
                ),
                2 if rust => format!("    // {}\n", words.pick(rng)),
                2 => format!("    # {}\n", words.pick(rng)),
                _ if rust => format!("    let {var}_mask = 0x{:016x}u64;\n", rng.random::<u64>()),
                _ => format!("    {var}_mask = 0x{:016x}\n", rng.random::<u64>()),
            };
            out.push_str(&line);
        }
        out.push_str(if rust {
            "    Some(limit)\n}\n\n"
        } else {
            "    return limit\n\n"
        });
    }
    out
}
