pub(crate) mod path;
pub(crate) mod value;
