"""CI outputs of a run or a sweep: JUnit XML (``junit``), and under GitHub Actions a Markdown job summary
(``markdown``) and ``::error`` / ``::warning`` annotations (``github_actions``)."""
