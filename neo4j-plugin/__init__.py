"""HRT's Neo4j procedures (Java sources; see pom.xml). A Python package only so that an installed
HRT carries the sources that ``hrt dev up`` builds into a jar."""
