//! What a client checks of a sealed pack before it installs it, made by the publisher before
//! a pack can reach one: `packer verify`, `packer publish --keys` and `packer release` refuse
//! what every client would.
//!
//! The structure (magic, header, key slots, segment table, sizes, the sealed length) needs
//! no key and is all [`pack_format::read_header`]; the rest needs a content key: decryption,
//! every file against the index, and the contract of the pack's schema.

use anyhow::{Context, Result, bail};
use pack_contract::{Contract, Validator, plain};
use pack_format::{ContentKeyRing, FormatError, Limits, OpenedPack, PackRef, sha256_hex};

use crate::build::missing_templates;
use crate::fsio::spinner;

/// Opens `bytes` with `keys` and checks every file against the contract of the pack's
/// schema, as a client does before installing it. `what` names the pack in messages (a file,
/// or a name and version on a server). Each template problem is printed on stderr, one a
/// line, before the error.
pub fn open_as_client(bytes: &[u8], keys: &ContentKeyRing, what: &str) -> Result<OpenedPack> {
    let progress = spinner("decrypting and checking");
    let opened = pack_format::open(bytes, keys, &Limits::DEFAULT);
    progress.finish_and_clear();
    let opened = match opened {
        Ok(opened) => opened,
        Err(
            error @ (FormatError::UnknownContentKey { .. } | FormatError::WrongContentKey { .. }),
        ) => {
            return Err(error).with_context(|| {
                format!(
                    "{what} does not open with the content keys given ({}); clients holding \
                     only those keys refuse it (was it built with another --keys directory?)",
                    keys.ids().join(", ")
                )
            });
        }
        Err(error) => return Err(error).with_context(|| format!("{what} does not open")),
    };
    let schema = opened.header.schema;
    let contract = Contract::of_pack(schema, |path| opened.payload.get(path))
        .with_context(|| format!("{what} opens, but every client would refuse it"))?;
    let Some(contract) = contract else {
        bail!(
            "{what} targets schema {schema}, which this packer does not know (it knows {}); its \
             templates cannot be checked, and clients of this release refuse it",
            Contract::known_schemas()
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let problems = contract_problems(&opened, &contract);
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("{problem}");
        }
        bail!(
            "{what} opens, but {} problem(s) against its contract ({}); every client would \
             refuse it",
            problems.len(),
            contract.kind(),
        );
    }
    Ok(opened)
}

/// What a client does with the bytes a channel entry of pack `pack` names before it
/// installs them: they must have the entry's SHA-256 and a header that agrees with the
/// entry (name, version, schema), and then open as [`open_as_client`] opens them.
pub fn open_entry_as_client(
    bytes: &[u8],
    pack: &str,
    entry: &PackRef,
    keys: &ContentKeyRing,
    what: &str,
) -> Result<OpenedPack> {
    let sha256 = sha256_hex(bytes);
    if sha256 != entry.sha256 {
        bail!(
            "{what}: the bytes served have SHA-256 {sha256}, the server's record says {}",
            entry.sha256
        );
    }
    let (header, _) = pack_format::read_header(bytes, &Limits::DEFAULT)
        .with_context(|| format!("{what} is not a sealed pack clients accept"))?;
    let fields = [
        ("name", pack.to_string(), header.name),
        (
            "version",
            entry.version.to_string(),
            header.version.to_string(),
        ),
        (
            "schema",
            entry.schema.to_string(),
            header.schema.to_string(),
        ),
    ];
    for (field, expected, found) in fields {
        if expected != found {
            bail!("{what}: its header says {field} {found:?}, the entry {expected:?}");
        }
    }
    open_as_client(bytes, keys, what)
}

/// Why a client refuses an opened pack on its contents: a template the contract requires
/// is missing, or a template does not fit the contract. Empty when it installs.
fn contract_problems(opened: &OpenedPack, contract: &Contract) -> Vec<String> {
    let schema = contract.schema();
    let mut problems: Vec<String> =
        missing_templates(contract, |path| opened.payload.get(path).is_some())
            .into_iter()
            .map(|missing| {
                format!(
                    "{missing}: missing from the pack; clients of schema {schema} render it and \
                     refuse a pack without it"
                )
            })
            .collect();
    let validator = Validator::new(contract);
    for (path, bytes) in opened.payload.files() {
        if !path.ends_with(".hbs") {
            if contract.is_open() {
                problems.extend(plain::check_plain_file(path, bytes).into_iter().map(|p| {
                    match p.line {
                        Some(line) => format!("{path}:{line}: {}", p.message),
                        None => format!("{path}: {}", p.message),
                    }
                }));
            }
            continue;
        }
        match std::str::from_utf8(bytes) {
            Ok(source) => problems.extend(
                validator
                    .problems(path, source)
                    .iter()
                    .map(ToString::to_string),
            ),
            Err(_) => problems.push(format!("{path}: not UTF-8")),
        }
    }
    problems
}
