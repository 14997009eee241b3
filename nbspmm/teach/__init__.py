"""nbspmm.teach: the data, models and drawings the notebooks (``notebooks/``) are built from.

Everything a notebook shows lives here or in the rest of the package, tested, so that a notebook is
narrative over imported code. Nothing here needs a GPU except ``live`` and the recording function of
``balance``.

  recorded   results recorded on the H200 (the repository's ``results/``): benchmark files,
             GPU test summaries, pipeline timelines, the WCSR load-balancing record; ``label`` says where and when each was measured, and
             ``NOT_RECORDED`` is what a notebook says where nothing was recorded yet
  floors     the first-principles cost of an SpMM: flops, bytes that must move, arithmetic intensity,
             time floors from the H200's ceilings (formulas, labelled as such)
  ring       a pure-Python model of the mbarrier (arrivals, transaction bytes, phase parity) and a
             discrete-event simulation of a producer/consumer ring of stages that checks the parity rule
  timeline   pipeline timeline records (the ``timeline_<variant>.json`` format): validation, per-role
             statistics (busy time, load/compute overlap); a simulated ring as a record (labelled)
  layouts    host models of the hardware's data movement: TMA boxes with out-of-bounds fill, tensor
             map planning without a GPU, the swizzle as a map, bank conflicts, WCSR's gather of B rows
             by 1-row boxes, how wgmma reads an operand through its descriptor, and one warpgroup
             product emulated per thread
  balance    the WCSR kernel's load balancing measured (split vs unsplit windows, atomic vs two-pass
             combination): the recorder (GPU), its record format, checks, tables; the arrow matrix
  scattered  notebook 07's section on scattered matrices: WCSR tile fill and ``format="auto"``'s pick,
             the row kernel's loads in flight read from its SASS, the recorded paper-scale comparison
  plots      matplotlib drawings of all the above (spy plots, condensed tiles, split plans, swizzle,
             fragment map, descriptor bits, phase diagram, timeline, cost floors, load balance)
  live       the same cells on a Hopper GPU: timing with CUDA events, the ladder, the benchmark
             harness, the instrumented kernel's timeline
  source     print a function's source (or the part between two markers) from the package, so that
             notebooks quote the code that runs instead of pasting it
  tables     lists of dicts as Markdown tables
"""
