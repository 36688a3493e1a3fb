//! `Validator` (what `packer build` and `packer verify` run) finds exactly what the whole
//! check (`compile_checked`, what clients run before installing a pack) finds: no template
//! passes one and fails the other, and a template that fails gets the same messages and
//! lines from both. Templates here are drawn from fragments that make the piecewise check
//! easy to get wrong: blocks closed or not, comments holding tags, escaped braces, strings
//! holding braces, unknown variables, tags over several lines.

use pack_contract::{Contract, TemplateError, Validator, compile_checked};

const FRAGMENTS: &[&str] = &[
    "text ",
    "\n",
    "  \n",
    "{{persona}}",
    "{{{data_dir}}}",
    "{{ role_directory }}",
    "{{nope}}",
    "{{tools}}",
    "{{tools.read}}",
    "{{#if tools.read}}",
    "{{~#if features.memory~}}",
    "{{#unless surface.cli}}",
    "{{#if nope}}",
    "{{else}}",
    "{{else if layer.root}}",
    "{{else if nope}}",
    "{{^}}",
    "{{/if}}",
    "{{/unless}}",
    "{{/each}}",
    "{{#each skills}}",
    "{{#each skills as |skill i|}}",
    "{{this.name}}",
    "{{skill.name}}",
    "{{@index}}",
    "{{../persona}}",
    "{{#with tools}}",
    "{{/with}}",
    "{{read}}",
    "{{eq persona \"mavis\"}}",
    "{{#if (eq persona \"}}{{\")}}",
    "{{#if (and tools.read tools.bash)}}",
    "{{not}}",
    "{{! a note }}",
    "{{!-- {{nope}} --}}",
    "{{!-- {{#if a}} }} --}}",
    "{{! -- x }}",
    "{{!-- open",
    "--}}",
    "\\{{nope}}",
    "\\\\{{persona}}",
    "{{{{raw}}}}",
    "{{x [a b]}}",
    "{{> partial}}",
    "{{#*inline \"p\"}}",
    "{{#> layout}}",
    "{{lookup skills 0}}",
    "{{persona x=1}}",
    "{{",
    "}}",
    "{",
    "}",
    "'",
    "\"",
    "{{persona\n}}",
    "{{#if\n  tools.grep}}",
    "{{skills.0.name}}",
    "\r\n",
    "é",
];

/// A small fixed-seed generator, so a failure names a case that comes back.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn whole(file: &str, source: &str, contract: &Contract) -> Vec<TemplateError> {
    compile_checked(file, source, contract)
        .err()
        .unwrap_or_default()
}

#[test]
fn validator_and_whole_check_agree_on_every_drawn_template() {
    let contract = Contract::builtin(1).expect("schema 1 is built in");
    // One validator for every case, as `packer build` keeps one for a tree: a piece that
    // passed in one template is taken as passed in the next.
    let validator = Validator::new(&contract);
    let mut rng = Rng(0x5eed_cafe);
    let mut passed = 0;
    for case in 0..8_000 {
        let len = 1 + rng.below(12);
        let source: String = (0..len)
            .map(|_| FRAGMENTS[rng.below(FRAGMENTS.len())])
            .collect();
        let file = format!("t{case}.hbs");
        let expected = whole(&file, &source, &contract);
        assert_eq!(
            validator.problems(&file, &source),
            expected,
            "case {case}: {source:?}"
        );
        passed += usize::from(expected.is_empty());
    }
    // Both kinds are drawn often enough to mean something.
    assert!(passed > 400, "only {passed} of 8,000 templates passed");
    assert!(passed < 7_600, "{passed} of 8,000 templates passed");
}

#[test]
fn a_shared_piece_that_passed_does_not_hide_a_problem_around_it() {
    let contract = Contract::builtin(1).expect("schema 1 is built in");
    let validator = Validator::new(&contract);
    let block = "{{#if tools.read}}Read {{persona}}.{{/if}}\n";
    assert!(validator.problems("a.hbs", block).is_empty());
    // The same block, with an unknown variable after it and then never closed.
    let errors = validator.problems("b.hbs", &format!("{block}{{{{nope}}}}\n"));
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["b.hbs:2: unknown variable 'nope'"]
    );
    let errors = validator.problems("c.hbs", &format!("x\n{{{{#if tools.read}}}}\n{block}"));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].file, "c.hbs");
    assert_eq!(errors[0].line, 2);
}

#[test]
fn a_problem_between_comments_strings_and_blocks_is_found() {
    let contract = Contract::builtin(1).expect("schema 1 is built in");
    let validator = Validator::new(&contract);
    // Each hides `{{nope}}` from a scan that ends a comment, string or block too late.
    for source in [
        "{{!-- a --}}{{nope}}{{!-- b --}}",
        "{{! -- a --}}{{nope}}{{! -- b --}}",
        "{{! a }}{{nope}}{{! b }}",
        "{{!-- a }}{{nope}}",
        "{{eq persona \"a\"}}{{nope}}{{eq persona \"b\"}}",
        "{{eq persona 'a'}}{{nope}}{{eq persona 'b'}}",
        "{{#if tools.read}}{{/if}}{{nope}}{{#if tools.read}}{{/if}}",
        "{{{persona}}}{{nope}}{{{persona}}}",
    ] {
        let expected = whole("t.hbs", source, &contract);
        assert!(!expected.is_empty(), "{source:?} should fail");
        assert_eq!(validator.problems("t.hbs", source), expected, "{source:?}");
    }
}
