"""The served route at build: the second pass that records the Dynamo cache entries of the
package's own ``torch.compile`` calls (``dynamo_pass``), made packageable (``dynamo_packaging``,
``graph_saving``), what each trace read (``dynamo_reads``) and where its dropped guards were made
(``guard_sites``), and the proof that installs and runs them in a fresh process before they ship
(``served_proof``). The run side's half is run/served/."""
