//! The rollback list of an ADD: Go's `defer func() { if !success { ... } }()`
//! blocks, kept in one place.

use std::fmt::Display;

/// The steps that take back what an ADD has done so far. Dropped without
/// [`Undo::commit`] (an early return, a `?`), it runs them newest first;
/// a failing step is logged and the older ones still run, since the ADD's
/// own error is what the runtime sees.
pub(crate) struct Undo<'a> {
    steps: Vec<Box<dyn FnOnce() -> Result<(), String> + 'a>>,
}

impl<'a> Undo<'a> {
    /// An empty list.
    pub(crate) fn new() -> Self {
        Undo { steps: Vec::new() }
    }

    /// Adds `step`, to run before every step added earlier.
    pub(crate) fn push<T, E: Display>(&mut self, step: impl FnOnce() -> Result<T, E> + 'a) {
        self.steps.push(Box::new(move || {
            step().map(drop).map_err(|e| e.to_string())
        }));
    }

    /// The ADD succeeded: nothing is undone.
    pub(crate) fn commit(mut self) {
        self.steps.clear();
    }
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        while let Some(step) = self.steps.pop() {
            if let Err(e) = step() {
                tracing::warn!("undo ADD: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn note(ran: &RefCell<Vec<u8>>, step: u8) -> Result<(), &'static str> {
        ran.borrow_mut().push(step);
        if step == 2 {
            return Err("fails");
        }
        Ok(())
    }

    #[test]
    fn dropped_runs_newest_first_past_failures() {
        let ran = RefCell::new(Vec::new());
        {
            let mut undo = Undo::new();
            for step in 1..=3 {
                let ran = &ran;
                undo.push(move || note(ran, step));
            }
        }
        assert_eq!(*ran.borrow(), [3, 2, 1]);
    }

    #[test]
    fn committed_runs_nothing() {
        let ran = RefCell::new(Vec::new());
        let mut undo = Undo::new();
        undo.push(|| note(&ran, 1));
        undo.commit();
        assert!(ran.borrow().is_empty());
    }
}
