# Statistics over every run of the grid: tidy CSV tables and their LaTeX versions.


rule aggregate:
    input:
        done=done_files(),
        code=analysis_code("aggregate"),
    output:
        tables=[report(path, category="Tables", caption="../report/tables.rst")
                if path.endswith("stats.csv") else path for path in TABLE_FILES],
        latex=LATEX_TABLE_FILES,
    log:
        f"{LOGS}/aggregate.log",
    params:
        run_dirs=quote_all(run_dirs()),
        settings=analysis_flags(),
        out=lambda wildcards, output: folder_of(output.tables),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../envs/lore.yaml"
    shell:
        "python -m lore.report.cli aggregate {params.run_dirs} --out {params.out} {params.settings} > {log} 2>&1"
