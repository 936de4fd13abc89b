//! How validation reports what is wrong: every problem of one file gathered into one
//! [`ConfigError`], one line each naming the file and the key, and TOML syntax errors with
//! their line and column. Validation goes on past a problem so that the user fixes the file
//! in one round instead of one key per run.

use std::fmt;

use super::ConfigError;

/// Every problem found in one file, reported together.
pub(super) struct Problems {
    file: String,
    list: Vec<String>,
    /// Keys whose value came from a mount option (the key, the option as written): their
    /// problems are named by the option instead of the file.
    options: Vec<(String, String)>,
}

impl Problems {
    /// No problems yet in `file` (as it is named in messages).
    pub(super) fn new(file: String) -> Problems {
        Problems {
            file,
            list: Vec::new(),
            options: Vec::new(),
        }
    }

    /// Names the problems of these keys (`mount.threads`, `tier[1].path`) by the mount
    /// option that set them (`-o threads=0: mount.threads: ...`).
    pub(super) fn name_by_options(&mut self, options: Vec<(String, String)>) {
        self.options = options;
    }

    pub(super) fn add(&mut self, key: &str, msg: impl fmt::Display) {
        let by = match self.options.iter().find(|(k, _)| k == key) {
            Some((_, opt)) => format!("-o {opt}"),
            None => self.file.clone(),
        };
        self.list.push(format!("{by}: {key}: {msg}"));
    }

    /// How many problems were found so far.
    pub(super) fn count(&self) -> usize {
        self.list.len()
    }

    pub(super) fn into_result<T>(self, ok: T) -> Result<T, ConfigError> {
        if self.list.is_empty() {
            Ok(ok)
        } else {
            Err(ConfigError::Invalid(self.list.join("\n")))
        }
    }

    /// The value of a key that names one of a few choices: `given` looked up in `options`,
    /// whose first entry is the default (also when the key is absent). Anything else is a
    /// problem listing the choices, and gets the default.
    pub(super) fn one_of<T: Copy>(
        &mut self,
        key: &str,
        given: Option<&str>,
        options: &[(&str, T)],
    ) -> T {
        let default = options[0].1;
        let Some(given) = given else {
            return default;
        };
        if let Some((_, v)) = options.iter().find(|(name, _)| *name == given) {
            return *v;
        }
        let names: Vec<String> = options.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        self.add(
            key,
            format_args!("{given:?} is not one of {}", names.join(", ")),
        );
        default
    }
}

/// Where `offset` falls in `text`, 1-based, counting columns in characters.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

/// A TOML syntax or shape error as `file:line:col: message`, with the offending line.
pub(super) fn toml_error(text: &str, file: &str, e: &toml::de::Error) -> ConfigError {
    // toml puts "expected ..." on a line of its own; keep the message on one line.
    let mut msg = e.message().trim().replace('\n', "; ");
    if msg.contains("expected a sequence") {
        msg.push_str(" (write each tier as a `[[tier]]` section, with double brackets)");
    }
    let Some(span) = e.span() else {
        return ConfigError::Invalid(format!("{file}: {msg}"));
    };
    let (line, col) = line_col(text, span.start);
    let src = text.lines().nth(line - 1).unwrap_or("");
    ConfigError::Invalid(format!("{file}:{line}:{col}: {msg}\n    {line} | {src}"))
}

#[cfg(test)]
mod tests {
    use super::super::testkit::parse;

    #[test]
    fn syntax_errors_have_line_and_column() {
        let err = parse("[[tier]]\nname = \"a\"\npath = /a\n").unwrap_err();
        assert!(err.starts_with("/etc/tierfs/test.toml:3:8: "), "{err}");
        let err = parse("[[tier]]\nname = \"a\"\npath = \"/a\"\nspeed = 1\n").unwrap_err();
        assert!(err.starts_with("/etc/tierfs/test.toml:4:1: "), "{err}");
        assert!(err.contains("speed"), "{err}");
        let err = parse("[tier]\nname = \"a\"\npath = \"/a\"\n").unwrap_err();
        assert!(err.contains("[[tier]]"), "{err}");
    }
}
