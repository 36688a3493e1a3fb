//! What a template author reads when a template does not parse: the block that was opened
//! and where, what is missing and where it goes — not the rule names of handlebars' grammar
//! at the end of the file. Each case is the message `packer build` and clients print.

use pack_contract::{Contract, validate_template};

fn error(source: &str) -> String {
    let contract = Contract::builtin(1).expect("schema 1 is built in");
    validate_template("t.hbs", source, &contract)
        .expect_err("the template should be refused")
        .to_string()
}

#[test]
fn an_unclosed_block_is_reported_where_it_opens() {
    assert_eq!(
        error("You are {{persona}}.\n  {{#if tools.read}}\nRead first.\n\nMore text.\n"),
        "t.hbs:2: template does not parse: `{{#if}}` opened at line 2, column 3 is never \
         closed; add `{{/if}}`"
    );
    // An `{{else}}` does not close it.
    assert_eq!(
        error("{{#each skills}}{{name}}{{else}}none"),
        "t.hbs:1: template does not parse: `{{#each}}` opened at line 1, column 1 is never \
         closed; add `{{/each}}`"
    );
}

#[test]
fn a_mismatched_close_names_both_blocks() {
    assert_eq!(
        error("ok\n{{#if persona}}\nyes\n{{/each}}\n"),
        "t.hbs:4: template does not parse: `{{/each}}` at line 4, column 1 does not match \
         `{{#if}}` opened at line 2, column 1; close that block with `{{/if}}`"
    );
}

#[test]
fn a_block_left_open_inside_another_is_reported_where_it_opens() {
    assert_eq!(
        error("{{#if persona}}\n  {{#each skills}}{{name}}\n{{/if}}\n"),
        "t.hbs:2: template does not parse: `{{#each}}` opened at line 2, column 3 is never \
         closed: `{{/if}}` at line 3, column 1 comes first; add `{{/each}}` before it"
    );
}

#[test]
fn a_close_without_an_open_says_so() {
    assert_eq!(
        error("text\n{{/unless}}\n"),
        "t.hbs:2: template does not parse: `{{/unless}}` at line 2, column 1 closes a block \
         that was never opened; remove it, or open the block before it with `{{#unless …}}`"
    );
}

#[test]
fn a_missing_brace_is_named() {
    assert_eq!(
        error("line one\nYou are {{persona}.\n"),
        "t.hbs:2: template does not parse: `{{persona}` at line 2, column 9: missing `}`"
    );
    assert_eq!(
        error("{{#if persona}x{{/if}}"),
        "t.hbs:1: template does not parse: `{{#if persona}` at line 1, column 1: missing `}`"
    );
    assert_eq!(
        error("{{{persona}}"),
        "t.hbs:1: template does not parse: `{{{persona}}` at line 1, column 1: missing `}`"
    );
    // Both braces missing: the tag runs into the next one.
    assert_eq!(
        error("You are {{persona\nand {{surface.name}}\n"),
        "t.hbs:1: template does not parse: `{{persona` at line 1, column 9 is never closed: \
         missing `}}`"
    );
}

#[test]
fn an_unclosed_comment_is_reported_where_it_opens() {
    assert_eq!(
        error("a\n{{!-- a note\nthat goes on\n"),
        "t.hbs:2: template does not parse: the `{{!--` comment opened at line 2, column 1 is \
         never closed; add `--}}`"
    );
    assert_eq!(
        error("{{! a note"),
        "t.hbs:1: template does not parse: the `{{!` comment opened at line 1, column 1 is \
         never closed; add `}}`"
    );
}

#[test]
fn an_else_outside_any_block_says_where_it_goes() {
    assert_eq!(
        error("{{persona}}\n{{else}}\n"),
        "t.hbs:2: template does not parse: `{{else}}` at line 2, column 1 is outside any \
         block; an `{{else}}` goes between `{{#if …}}` (or `#unless`, `#each`, `#with`) and \
         its `{{/if}}`"
    );
}

/// When the scan finds nothing it can name, the parser's own message stands, with its
/// line and column.
#[test]
fn other_syntax_errors_keep_the_parsers_message_and_column() {
    let message = error("ok\nthen {{persona x=}}\n");
    assert!(
        message.starts_with("t.hbs:2: template does not parse: column "),
        "{message}"
    );
    assert!(message.contains("invalid handlebars syntax"), "{message}");
}

#[test]
fn valid_templates_and_other_problems_are_unchanged() {
    let contract = Contract::builtin(1).expect("schema 1 is built in");
    for source in [
        "You are {{persona}}.\n{{#if tools.read}}Read.{{else}}Ask.{{/if}}\n",
        "{{!-- {{#if}} in a comment is text --}}{{! so is {{/each}} }}\n",
        "{{#each skills}}- {{name}}{{#if @first}} (first){{/if}}\n{{/each}}",
        r"\{{#if}} escaped braces are text",
    ] {
        assert_eq!(
            validate_template("t.hbs", source, &contract),
            Ok(()),
            "{source}"
        );
    }
    assert_eq!(
        error("{{#if persona}}{{nope}}{{/if}}"),
        "t.hbs:1: unknown variable 'nope'"
    );
}
