//! A process-wide choice among a few named values: set by its setter, else read once from an
//! environment variable, else the default. [`matmul`](crate::cuda::matmul)'s path and
//! [`packed`](crate::cuda::packed)'s exponent form are two.

use std::sync::atomic::{AtomicU8, Ordering};

/// One setting. `names` gives every value its names, the default's first; a value's first name
/// is the one errors list, later ones are aliases. The value in force is stored as the index of
/// its first name + 1 (0: unset, read `var`).
pub(crate) struct Setting<T: 'static> {
    var: &'static str,
    what: &'static str,
    names: &'static [(&'static str, T)],
    state: AtomicU8,
}

impl<T: Copy + PartialEq> Setting<T> {
    /// The setting read from `var`, its values called `what` in errors ("matmul path").
    pub(crate) const fn new(
        var: &'static str,
        what: &'static str,
        names: &'static [(&'static str, T)],
    ) -> Self {
        Self {
            var,
            what,
            names,
            state: AtomicU8::new(0),
        }
    }

    /// The value named `s`, or an error listing the names.
    pub(crate) fn parse(&self, s: &str) -> Result<T, String> {
        if let Some(&(_, value)) = self.names.iter().find(|(name, _)| *name == s) {
            return Ok(value);
        }
        let mut listed: Vec<&str> = Vec::new();
        for (i, (name, value)) in self.names.iter().enumerate() {
            if !self.names[..i].iter().any(|(_, v)| v == value) {
                listed.push(name);
            }
        }
        let expected = match listed.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => listed.concat(),
        };
        Err(format!("unknown {} `{s}` (expected {expected})", self.what))
    }

    /// Sets the value for the whole process (overrides the variable).
    pub(crate) fn set(&self, value: T) {
        let index = self.names.iter().position(|(_, v)| *v == value);
        self.state
            .store(index.map_or(0, |i| i as u8 + 1), Ordering::Relaxed);
    }

    /// The value in force: [`Setting::set`]'s, else the variable's (read once), else the default.
    pub(crate) fn get(&self) -> T {
        match self.state.load(Ordering::Relaxed) {
            0 => {
                let value = std::env::var(self.var)
                    .ok()
                    .and_then(|v| self.parse(&v).ok())
                    .unwrap_or(self.names[0].1);
                self.set(value);
                value
            }
            i => self.names[usize::from(i) - 1].1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Setting;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Pick {
        A,
        B,
        C,
    }

    static PICK: Setting<Pick> = Setting::new(
        "DF11_TEST_SETTING_UNSET",
        "pick",
        &[
            ("a", Pick::A),
            ("b", Pick::B),
            ("c", Pick::C),
            ("see", Pick::C),
        ],
    );

    #[test]
    fn names_aliases_and_the_error() {
        assert_eq!(PICK.parse("b"), Ok(Pick::B));
        assert_eq!(PICK.parse("see"), Ok(Pick::C));
        assert_eq!(
            PICK.parse("d"),
            Err("unknown pick `d` (expected a, b or c)".to_string())
        );
    }

    #[test]
    fn default_then_the_value_set() {
        assert_eq!(PICK.get(), Pick::A);
        PICK.set(Pick::C);
        assert_eq!(PICK.get(), Pick::C);
        PICK.set(Pick::A);
        assert_eq!(PICK.get(), Pick::A);
    }
}
