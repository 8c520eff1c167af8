//! The rollback list of an ADD: Go's `defer func() { if !success { ... } }()`
//! blocks, kept in one place.

use std::fmt::Display;

/// The steps that take back what an ADD has done so far, each failing
/// with an `E` (the plugin's error). Dropped without [`Undo::commit`] (an
/// early return, a `?`), it runs them newest first; a failing step is
/// logged and the older ones still run, since the ADD's own error is what
/// the runtime sees.
pub(crate) struct Undo<'a, E: Display = crate::Error> {
    steps: Vec<Box<dyn FnOnce() -> Result<(), E> + 'a>>,
}

impl<'a, E: Display> Undo<'a, E> {
    /// An empty list.
    pub(crate) fn new() -> Self {
        Undo { steps: Vec::new() }
    }

    /// Adds `step`, to run before every step added earlier.
    pub(crate) fn push<T, F: Into<E>>(&mut self, step: impl FnOnce() -> Result<T, F> + 'a) {
        self.steps
            .push(Box::new(move || step().map(drop).map_err(Into::into)));
    }

    /// The ADD succeeded: nothing is undone.
    pub(crate) fn commit(mut self) {
        self.steps.clear();
    }

    /// Runs the steps newest first, each one whatever the others did,
    /// and returns the failures in the order they ran.
    fn run_steps(&mut self) -> Vec<E> {
        let mut failed = Vec::new();
        while let Some(step) = self.steps.pop() {
            if let Err(e) = step() {
                failed.push(e);
            }
        }
        failed
    }
}

impl<E: Display> Drop for Undo<'_, E> {
    fn drop(&mut self) {
        // The steps' errors are typed until here, where nothing but the
        // log can take them (the ADD's own error is returned).
        for e in self.run_steps() {
            tracing::warn!("undo ADD: {e}");
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn note(ran: &RefCell<Vec<u8>>, step: u8) -> Result<(), String> {
        ran.borrow_mut().push(step);
        if step % 2 == 0 {
            return Err(format!("step {step} fails"));
        }
        Ok(())
    }

    #[test]
    fn dropped_runs_newest_first_past_failures() {
        let ran = RefCell::new(Vec::new());
        {
            let mut undo = Undo::<String>::new();
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
        let mut undo = Undo::<String>::new();
        undo.push(|| note(&ran, 1));
        undo.commit();
        assert!(ran.borrow().is_empty());
    }

    #[test]
    fn run_returns_every_failure_typed() {
        let ran = RefCell::new(Vec::new());
        let mut undo = Undo::<crate::Error>::new();
        for step in 1..=4 {
            let ran = &ran;
            undo.push(move || note(ran, step).map_err(crate::Error::Config));
        }
        let failed = undo.run_steps();
        assert_eq!(*ran.borrow(), [4, 3, 2, 1]);
        let texts: Vec<_> = failed.iter().map(|e| e.to_string()).collect();
        assert_eq!(texts, ["step 4 fails", "step 2 fails"]);
        assert!(matches!(failed[0], crate::Error::Config(_)));
    }
}
