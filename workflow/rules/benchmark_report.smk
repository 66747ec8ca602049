# The LLM-prior benchmark report (config/benchmark.yaml: docs/benchmark/): README.md with the per-arm
# table, summary.csv, and copies of the figures it cites and of the CSV tables. The project README's
# Figure 1 is docs/benchmark/figures/fig1_success.png and its headline table is rewritten from
# docs/benchmark/summary.csv (lore.paper.readme), so neither can drift from what the code produces.
# Only with `benchmark_report:` set.


if BENCHMARK_REPORT_DIR:

    rule benchmark_report:
        localrule: True
        input:
            tables=TABLE_FILES,
            figures=[f"{FIGURES_DIR}/{name}.png" for name in BENCHMARK_REPORT_FIGURES],
            code=analysis_code("benchmark_report"),
        output:
            readme=report(f"{BENCHMARK_REPORT_DIR}/README.md", category="Benchmark report"),
            files=BENCHMARK_REPORT_FILES[1:],
        log:
            f"{LOGS}/benchmark_report.log",
        params:
            settings=analysis_flags(),
            tables=lambda wildcards, input: folder_of(input.tables),
            figures=lambda wildcards, input: folder_of(input.figures),
            out=lambda wildcards, output: folder_of([output.readme]),
            headline=readme_headline_command,
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        conda:
            "../envs/lore.yaml"
        shell:
            "python -m lore.report.cli benchmark-report --tables {params.tables} --figures {params.figures} "
            "--out {params.out} {params.settings} > {log} 2>&1 {params.headline}"
