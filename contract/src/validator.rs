//! [`Validator`]: the check of many templates against one contract, for `packer build` and
//! `packer verify`, which only need to know what is wrong (not the compiled templates).

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use handlebars::template::Template;
use handlebars::{Context, Handlebars, RenderContext, Renderable, StringOutput};

use crate::{Contract, MAX_TEMPLATE_LEN, TemplateError, compile_checked, pieces, static_check};

/// Checks templates against one contract, finding exactly what [`compile_checked`] finds,
/// with the same messages and lines, at a cost that grows with the number of tags rather
/// than the square of a template's length.
///
/// A template is cut into its top-level pieces (each `{{path}}`, and each block from its
/// `{{#…}}` to its `{{/…}}`, without the text between its tags), and each piece is compiled,
/// walked and rendered in strict mode on its own: in a whole template, every top-level
/// element is checked against the root of the contract, whatever stands around it. A piece
/// that passed once passes again, so it is remembered, in whichever template it shows up.
/// A template with any piece that fails, or one the cut does not follow (escapes, raw
/// blocks, brackets), is checked whole by [`compile_checked`], which says what and where.
pub struct Validator<'c> {
    contract: &'c Contract,
    /// Strict, with the runtime's helpers, as [`crate::strict_registry`] makes it.
    registry: Handlebars<'static>,
    /// The contract's sample contexts for `true` and `false`, wrapped once.
    contexts: [Context; 2],
    /// Pieces that compiled, walked and rendered without a problem.
    passed: Mutex<HashSet<String>>,
}

impl<'c> Validator<'c> {
    pub fn new(contract: &'c Contract) -> Self {
        Validator {
            contract,
            registry: crate::strict_registry(),
            contexts: [
                Context::from(contract.sample(true).clone()),
                Context::from(contract.sample(false).clone()),
            ],
            passed: Mutex::new(HashSet::new()),
        }
    }

    /// Every problem of the template `source`, called `file_name` in messages, in source
    /// order: what [`crate::validate_template_all`] returns.
    pub fn problems(&self, file_name: &str, source: &str) -> Vec<TemplateError> {
        if source.len() <= MAX_TEMPLATE_LEN && !self.contract.open && self.all_pieces_pass(source) {
            return Vec::new();
        }
        match compile_checked(file_name, source, self.contract) {
            Ok(_) => Vec::new(),
            Err(errors) => errors,
        }
    }

    fn all_pieces_pass(&self, source: &str) -> bool {
        let Some(pieces) = pieces::split(source) else {
            return false;
        };
        pieces.into_iter().all(|piece| self.piece_passes(piece))
    }

    fn piece_passes(&self, piece: String) -> bool {
        if self.passed().contains(&piece) {
            return true;
        }
        let Ok(template) = Template::compile(&piece) else {
            return false;
        };
        if !static_check("", &template, self.contract).is_empty() {
            return false;
        }
        for context in &self.contexts {
            let mut render = RenderContext::new(None);
            let mut out = StringOutput::new();
            if template
                .render(&self.registry, context, &mut render, &mut out)
                .is_err()
            {
                return false;
            }
        }
        self.passed().insert(piece);
        true
    }

    fn passed(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // A panic elsewhere leaves the set as it was: every piece in it passed.
        self.passed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
