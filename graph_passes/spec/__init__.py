"""The fusion spec: the contract between the graph pass and the op package generator.

    model.py    the spec's types and their JSON form
    builder.py  spec objects for the tasks and groups of an analysed model
    read.py     strict reading of a spec's JSON (every field typed, or one error line)
    check.py    does a spec describe this fused model?
"""
