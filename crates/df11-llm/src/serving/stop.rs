//! Stop sequences over streamed text: text is passed on as it comes, except a tail that could
//! still be the start of a stop sequence, which is held back until it cannot (or until the end).
//! When a stop sequence appears, the text before it is the last that goes out.

/// The stop check of one request.
#[derive(Debug, Clone, Default)]
pub struct StopText {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopText {
    /// A check for `stops` (none: everything passes at once).
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops,
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop sequence was found.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds `piece`; returns the text that can go out now, and whether a stop sequence ended
    /// the text (nothing goes out after it).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.held.push_str(piece);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.stopped = true;
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        // Hold back the longest tail that is a proper prefix of some stop sequence.
        let keep = self
            .stops
            .iter()
            .flat_map(|s| {
                let held = &self.held;
                (1..s.len().min(held.len() + 1))
                    .filter(move |&n| s.is_char_boundary(n) && held.ends_with(&s[..n]))
            })
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        (out, false)
    }

    /// The text held back (at the end of generation, when no stop sequence came).
    pub fn flush(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams `pieces` and returns the text that went out and whether it stopped.
    fn stream(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut s = StopText::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            let (o, stopped) = s.push(p);
            out.push_str(&o);
            if stopped {
                return (out, true);
            }
        }
        out.push_str(&s.flush());
        (out, false)
    }

    #[test]
    fn stops_across_pieces_and_holds_back_only_prefixes() {
        assert_eq!(stream(&[], &["a", "b"]), ("ab".into(), false));
        assert_eq!(
            stream(&["END"], &["abc E", "N", "D more"]),
            ("abc ".into(), true)
        );
        assert_eq!(stream(&["END"], &["abc E", "x"]), ("abc Ex".into(), false));
        assert_eq!(stream(&["xy", "b"], &["aab"]), ("aa".into(), true));
        assert_eq!(stream(&["é!"], &["caf", "é", "é!"]), ("café".into(), true));
        // A held tail comes out at the end when no stop sequence completes it.
        assert_eq!(stream(&["END"], &["the EN"]), ("the EN".into(), false));
        let mut s = StopText::new(vec!["EN".into()]);
        assert_eq!(s.push("xE"), ("x".into(), false));
        assert_eq!(s.push("N"), ("".into(), true));
        assert_eq!(s.push("more"), ("".into(), true));
        assert!(s.flush().is_empty());
    }
}
