# Figures (PNG for the report, PDF for the paper), drawn from the raw run files and the tables.


rule figures:
    input:
        done=done_files(),
        tables=TABLE_FILES,
        code=analysis_code("figures"),
    output:
        png=[report(f"{FIGURES_DIR}/{name}.png", category="Figures", caption=f"../report/{name}.rst")
             for name in FIGURE_NAMES],
        pdf=[f"{FIGURES_DIR}/{name}.pdf" for name in FIGURE_NAMES],
    log:
        f"{LOGS}/figures.log",
    params:
        run_dirs=quote_all(run_dirs()),
        settings=analysis_flags(),
        tables=lambda wildcards, input: folder_of(input.tables),
        out=lambda wildcards, output: folder_of(output.png),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../envs/lore.yaml"
    shell:
        "MPLBACKEND=Agg python -m lore.report.cli figures {params.run_dirs} --tables {params.tables} "
        "--out {params.out} {params.settings} > {log} 2>&1"
