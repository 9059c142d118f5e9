# /etc/jupyter/nbgrader_config.py in the course image: what every user on the hub shares.
# The instructor's course folder (a clone of this repository) has its own nbgrader_config.py.
c = get_config()  # noqa: F821  (provided by nbgrader)

c.CourseDirectory.course_id = "gpucourse"
# A volume shared by every server (ReadWriteMany; see deploy/helm/values.yaml).
c.Exchange.root = "/srv/nbgrader/exchange"
