# The paper: LaTeX macros and tables from the statistics, then the PDF (latexmk / pdflatex).
from lore.paper.method import QUOTED_RECORDS


rule paper_macros:
    input:
        tables=TABLE_FILES,
        code=analysis_code("paper_macros"),
        # the records of the experiments the paper quotes (how the default was chosen, the claim on Crafter)
        decision=[str(REPO / p) for p in QUOTED_RECORDS if (REPO / p).is_file()],
    output:
        GENERATED_FILES,
    log:
        f"{LOGS}/paper_macros.log",
    params:
        settings=analysis_flags(),
        envs=quote_all(ENVS),
        tables=lambda wildcards, input: folder_of(input.tables),
        out=lambda wildcards, output: folder_of(output),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/lore.yaml"
    shell:
        "python -m lore.paper.cli paper-macros --tables {params.tables} --out {params.out} "
        "--envs {params.envs} {params.settings} > {log} 2>&1"


rule paper:
    input:
        tex=str(REPO / "paper" / "lore.tex"),
        bib=str(REPO / "paper" / "lore.bib"),
        generated=GENERATED_FILES,
        figures=[f"{FIGURES_DIR}/{name}.pdf" for name in FIGURE_NAMES],
        code=analysis_code("paper"),
    output:
        # in the HTML report only once built: `snakemake --report` works after a run without the paper
        report(PAPER_PDF, category="Paper", caption="../report/paper.rst") if os.path.exists(PAPER_PDF) else PAPER_PDF,
    log:
        f"{LOGS}/paper.log",
    params:
        generated=lambda wildcards, input: folder_of(input.generated),
        figures=lambda wildcards, input: folder_of(input.figures),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/lore.yaml"
    shell:
        # Fails with a message naming the TeX Live packages to install when LaTeX is missing.
        "python -m lore.paper.cli paper-build --tex {input.tex} --generated {params.generated} "
        "--figures {params.figures} --out {output} --log {log}"
